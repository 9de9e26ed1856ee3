"""The two baselines a user might write instead: a sequential loop and a thread pool.

Both run in this process against the same emulator, list the waiting sessions, run each
call by calling the tool function directly, and post one batch per session. They keep no
ledger: a crash mid-run would lose or repeat calls, which is what toolfan pays to avoid.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from bench import tools
from bench.config import IO_TOOL, NOOP_TOOL, Workload
from bench.emu import Emulator, latencies, pending_times, session_body
from bench.figures import LOOP, THREADS, Measurement
from bench.measure import percentiles
from bench.stack import API_KEY
from dispatcher.client import AgentsClient
from dispatcher.models import FunctionCall, Session, tool_result_event

TOOLS: dict[str, Callable[..., str]] = {NOOP_TOOL: tools.bench_noop, IO_TOOL: tools.bench_io}
Runner = Callable[[AgentsClient, Workload], None]


def _event(call: FunctionCall) -> dict[str, Any]:
    """Run one call and wrap its output as a tool_result event."""
    output = TOOLS[call.name](**(call.arguments or {}))
    return tool_result_event(call.turn_id, call.call_id, success=True, output=output)


def _post(client: AgentsClient, session: Session, events: list[dict[str, Any]]) -> None:
    client.submit_events(session.id, events, uuid.uuid4().hex)


def sequential(client: AgentsClient, workload: Workload) -> None:
    """The tutorial loop: one session after another, one call after another."""
    for session in client.iter_sessions():
        _post(client, session, [_event(c) for c in session.function_calls])


def thread_pool(client: AgentsClient, workload: Workload) -> None:
    """Every call on a pool of the workers' threads; each session posted when done."""
    with ThreadPoolExecutor(workload.processes * workload.workers) as pool:
        jobs: list[tuple[Session, list[Future[dict[str, Any]]]]] = [
            (s, [pool.submit(_event, c) for c in s.function_calls]) for s in client.iter_sessions()
        ]
        for session, futures in jobs:
            _post(client, session, [f.result() for f in futures])


def run_inprocess(
    system: str, emu: Emulator, origin: str, workload: Workload, timeout: float
) -> Measurement:
    """Seed the sessions, run one baseline over them, and measure it like toolfan."""
    runner: Runner = sequential if system == LOOP else thread_pool
    count = workload.loop_sessions if system == LOOP else workload.sessions
    emu.reset()
    seeded = emu.seed([session_body(workload)] * count)
    with AgentsClient(api_key=API_KEY, base_url=f"{origin}/v1") as client:
        started, cpu = time.time(), time.process_time()
        runner(client, workload)
        cpu = time.process_time() - cpu
    batches = emu.wait_batches(count, timeout)
    calls = count * workload.calls
    return Measurement(
        system=system,
        workload=workload.name,
        sessions=count,
        calls=calls,
        seconds=max(b["received_at"] for b in batches) - started,
        latency=percentiles(latencies(batches, pending_times(seeded))),
        redis_commands_per_call=None,
        cpu_seconds_per_call=cpu / calls,
        extra={
            "batches": len(batches),
            "events": sum(len(b["events"]) for b in batches),
            "threads": workload.processes * workload.workers if system == THREADS else 1,
        },
    )
