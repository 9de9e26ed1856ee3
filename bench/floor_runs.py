"""The runs floor: the least the run-shaped protocol asks of any implementation.

The Assistants protocol lists no waiting runs: an application names each run, and only a
read of that run says whether it waits for tool outputs. So where a page of the sessions
list finds a hundred waiting sessions, every run costs a read of its own. Per run, the
least any implementation does, on toolfan's workers:

* one read of the run, by this process as a poller would (the runs are seeded already
  waiting, so one read finds each);
* one chord of one task per call, on the function's queue, each saving its result in the
  ledger before it returns (the same task as the sessions' floor);
* one ``submit_tool_outputs`` of the phase's outputs, from the chord's callback;
* one more read of the run once its submit is accepted. After a submit the run goes on:
  to another phase of calls, or to its end. Only a read tells which, so an implementation
  that answers every phase of a run reads it at least once after each submit. The floor
  knows when each submit landed (the API stand-in says so), so it spends exactly one.

No watch, no claim, no read while the calls run, no validation, no log line: toolfan's
runs row cannot beat it, so its ratio to raw Celery is the ceiling of any implementation of
the runs source on this machine, as the sessions' floor is for sessions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.assistants import run_body, run_requests, runs_measurement, seed_runs, wait_submits
from bench.config import Workload
from bench.emu import JSON, Emulator
from bench.engine import forget
from bench.figures import RUNS_FLOOR, SPLIT, Measurement
from bench.measure import CpuSplit, Window
from bench.stack import SUBMIT_QUEUE, BenchStack
from dispatcher.devstack import Service


def run_runs_floor(
    stack: BenchStack,
    emu: Emulator,
    workload: Workload,
    workers: list[Service],
    runs: int | None = None,
) -> Measurement:
    """Seed the runs at once; read and publish each, then read each again once submitted.

    Throughput counts as the runs row's does: from this process's first read (the moment
    the runs row names its runs to toolfan) to the last accepted submit.
    """
    count = runs or workload.sessions
    emu.reset()
    window = Window(stack.redis(), [w.proc.pid for w in workers])
    split = CpuSplit([w.proc.pid for w in workers], {"api": stack.emulator_pid})
    seeded = seed_runs(emu, [run_body(workload)] * count)
    with _api(f"{stack.origin}/v1", stack.env["OPENAI_API_KEY"]) as api:
        started, cpu = time.time(), time.process_time()
        published = _publish(api, workload, seeded.runs)
        answered = wait_submits(emu, count, stack.config.timeout, _read_again(api))
        publish_cpu = time.process_time() - cpu
    closed = window.close()
    requests = run_requests(emu, started)
    calls = count * workload.calls
    runs_answered = {(s["thread_id"], s["run_id"]) for s in answered}
    return runs_measurement(
        (RUNS_FLOOR, workload, count),
        (answered, seeded, started),
        closed.total_commands,
        closed.cpu + publish_cpu,
        {
            "published_runs": published,
            "retrieve_requests": requests["retrieve"],
            "submits": len(answered),
            "runs_answered": len(runs_answered),
            "outputs": sum(len(s["tool_outputs"]) for s in answered),
            "publish_cpu_seconds": publish_cpu,
            SPLIT: {
                **split.per_call(calls),
                "publisher": 1000 * publish_cpu / calls,
            },
        },
    )


def _api(base: str, api_key: str) -> httpx.Client:
    """A client of the runs API, authenticated as toolfan's own."""
    headers = {"Authorization": f"Bearer {api_key}", "OpenAI-Beta": "assistants=v2"}
    return httpx.Client(base_url=base, headers=headers, timeout=30)


def _read(api: httpx.Client, thread: str, run: str) -> dict[str, Any]:
    """One read of a run, by the path toolfan's client builds."""
    from dispatcher.client import path_segment

    path = f"/threads/{path_segment(thread)}/runs/{path_segment(run)}"
    answer: dict[str, Any] = api.get(path).raise_for_status().json()
    return answer


def _publish(api: httpx.Client, workload: Workload, runs: list[tuple[str, str]]) -> int:
    """Read each run once; a chord per run that waits for outputs. Returns how many."""
    from celery import chord

    from bench import tools
    from tasks.submit import UNSTORED  # no result stored: toolfan sends its calls so too

    published = 0
    for thread, run in runs:
        calls = _waiting_calls(_read(api, thread, run))
        if not calls:
            continue
        batch = f"{thread}/{run}"
        header = [
            tools.floor_call.si(batch, "", call, **arguments).set(queue=workload.queue, **UNSTORED)
            for call, arguments in calls
        ]
        body = tools.floor_runs_submit.s(thread, run).set(queue=SUBMIT_QUEUE, **UNSTORED)
        forget(chord(header)(body))
        published += 1
    return published


def _read_again(api: httpx.Client) -> Callable[[list[JSON]], None]:
    """What to do with new submits: read each submitted run once more (once only)."""
    read: set[tuple[str, str]] = set()

    def on_new(fresh: list[JSON]) -> None:
        for key in ((s["thread_id"], s["run_id"]) for s in fresh):
            if key not in read:
                read.add(key)
                _read(api, *key)

    return on_new


def _waiting_calls(run: dict[str, Any]) -> list[tuple[str, Any]]:
    """The function calls a run waits for: each call's id and its parsed arguments."""
    if run.get("status") != "requires_action":
        return []
    action = run.get("required_action") or {}
    calls = (action.get("submit_tool_outputs") or {}).get("tool_calls") or []
    return [
        (call["id"], _arguments(call["function"].get("arguments")))
        for call in calls
        if call.get("type") == "function"
    ]


def _arguments(value: Any) -> Any:
    """A call's arguments: a JSON text on the wire."""
    return json.loads(value) if isinstance(value, str) and value else value or {}
