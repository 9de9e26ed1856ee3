"""toolfan and raw Celery on the same worker: the measured system and the engine's ceiling."""

from __future__ import annotations

import json
import time
from typing import Any

from bench.config import Workload
from bench.emu import Emulator, answer_times, session_body
from bench.figures import RAW, RAW_LEDGER, SPLIT, TOOLFAN, Measurement
from bench.measure import Closed, CpuSplit, Window, percentiles
from bench.stack import SUBMIT_QUEUE, BenchStack, poll_passes
from dispatcher.devstack import Service

#: Seconds between the bench's checks of the raw chords' completion list.
RAW_CHECK_EVERY = 0.05


def run_toolfan(
    stack: BenchStack,
    emu: Emulator,
    workload: Workload,
    services: tuple[list[Service], Service],
    sessions: int | None = None,
) -> Measurement:
    """Seed the sessions at once; measure until every one has an accepted batch.

    Args:
        stack: The running stack.
        emu: Its emulator's admin client.
        workload: What to seed.
        services: The workers and the poller (their CPU counts).
        sessions: Fewer sessions than the workload's (a warm-up).
    """
    count = sessions or workload.sessions
    workers, poller = services
    emu.reset()
    passes_before = poll_passes(poller)
    window = Window(stack.redis(), [*(w.proc.pid for w in workers), poller.proc.pid])
    split = CpuSplit(
        [w.proc.pid for w in workers], {"poller": poller.proc.pid, "api": stack.emulator_pid}
    )
    seeded = emu.seed([session_body(workload)] * count)
    batches = emu.wait_batches(count, stack.config.timeout)
    closed = window.close()
    calls = count * workload.calls
    by_process = split.per_call(calls)
    passes = poll_passes(poller) - passes_before
    start, seconds, latency = answer_times(emu, seeded, batches)
    seeded_at = min(s.at for s in seeded)
    lists = emu.list_requests(since=window.started)
    return Measurement(
        system=TOOLFAN,
        workload=workload.name,
        sessions=count,
        calls=calls,
        seconds=seconds,
        latency=latency,
        redis_commands_per_call=closed.total_commands / calls,
        cpu_seconds_per_call=closed.cpu / calls,
        api_requests_per_poll=lists / passes if passes else None,
        extra={
            **_toolfan_extra(batches, closed, lists, passes),
            "poller_cpu_seconds": by_process["poller"] * calls / 1000,
            SPLIT: by_process,
            "seeded_to_first_request": start - seeded_at,
        },
    )


def _toolfan_extra(
    batches: list[dict[str, Any]], closed: Closed, lists: int, passes: int
) -> dict[str, Any]:
    """:func:`answered_extra`, and the poller's list requests and passes."""
    return {**answered_extra(batches, closed), "list_requests": lists, "poll_passes": passes}


def answered_extra(batches: list[dict[str, Any]], closed: Closed) -> dict[str, Any]:
    """Accounting (each session answered once, every call in it) and the raw counters."""
    return {
        "batches": len(batches),
        "sessions_answered": len({b["session_id"] for b in batches}),
        "events": sum(len(b["events"]) for b in batches),
        "failed_events": sum(1 for b in batches for e in b["events"] if not e["success"]),
        "redis_commands": closed.total_commands,
        "top_redis_commands": dict(list(closed.commands.items())[:12]),
        "cpu_seconds": closed.cpu,
    }


def run_raw(
    stack: BenchStack,
    workload: Workload,
    workers: list[Service],
    sessions: int | None = None,
    ledger: bool = False,
) -> Measurement:
    """One chord of K bare tasks per session, callback recording its end; no ledger, no HTTP.

    Time to answer counts from the first publish, as toolfan's counts from the moment all
    sessions became pending; ``extra`` has it from each chord's own publish too. With
    ``ledger`` (no-op only), each task also writes toolfan's ledger: the ``raw + ledger`` row.
    """
    count = sessions or workload.sessions
    key = f"bench:raw:{workload.name}:{time.monotonic_ns()}"
    client = stack.redis()
    window = Window(client, [w.proc.pid for w in workers])
    split = CpuSplit([w.proc.pid for w in workers], {"api": stack.emulator_pid})
    first, publish_cpu = _publish_chords(workload, key, count, ledger)
    checks = _wait_for_list(client, key, count, stack.config.timeout)
    closed = window.close()
    calls = count * workload.calls
    by_process = {**split.per_call(calls), "publisher": 1000 * publish_cpu / calls}
    records = [json.loads(r) for r in client.lrange(key, 0, -1)]
    # Our bookkeeping is not the engine's work: one RPUSH per chord, one LLEN per check.
    commands = closed.total_commands - count - checks
    return Measurement(
        system=RAW_LEDGER if ledger else RAW,
        workload=workload.name,
        sessions=count,
        calls=calls,
        seconds=max(r[1] for r in records) - first,
        latency=percentiles([done - first for _, done, _ in records]),
        redis_commands_per_call=commands / calls,
        cpu_seconds_per_call=(closed.cpu + publish_cpu) / calls,
        extra={
            "results": sum(r[2] for r in records),
            "latency_from_own_publish": percentiles([r[1] - r[0] for r in records]),
            "redis_commands": commands,
            "top_redis_commands": dict(list(closed.commands.items())[:12]),
            "cpu_seconds": closed.cpu,
            "publish_cpu_seconds": publish_cpu,
            SPLIT: by_process,
        },
    )


def _publish_chords(
    workload: Workload, key: str, count: int, ledger: bool = False
) -> tuple[float, float]:
    """Send the chords from this process; returns the first publish time and the CPU spent.

    Subscriptions to the results are dropped at once, as toolfan's poller does, so both
    pay the same SUBSCRIBE/UNSUBSCRIBE per task.
    """
    from celery import chord

    from bench import tools

    task = tools.raw_io if workload.arguments else tools.raw_noop
    first, cpu = time.time(), time.process_time()
    for session in range(count):
        if ledger:  # each call its own record, as toolfan's are
            header = [
                tools.raw_ledger_noop.si(f"{key}:{session}", str(call)).set(queue=workload.queue)
                for call in range(workload.calls)
            ]
        else:
            header = [
                task.si(**workload.arguments).set(queue=workload.queue)
                for _ in range(workload.calls)
            ]
        body = tools.raw_collect.s(key, time.time()).set(queue=SUBMIT_QUEUE)
        forget(chord(header)(body))
    return first, time.process_time() - cpu


def forget(result: Any) -> None:
    """Unsubscribe from a sent chord's results (the publisher never waits for them)."""
    from tasks.app import app

    consumer = getattr(app.backend, "result_consumer", None)
    if consumer is None:
        return
    members = list(getattr(result.parent, "results", None) or [])
    for sent in [*members, result]:
        consumer.cancel_for(sent.id)


def _wait_for_list(client: Any, key: str, length: int, timeout: float) -> int:
    """Wait until the list holds ``length`` records; returns how many checks it took.

    Raises:
        TimeoutError: the chords did not all finish in time.
    """
    deadline, checks = time.monotonic() + timeout, 0
    while True:
        checks += 1
        if client.llen(key) >= length:
            return checks
        if time.monotonic() > deadline:
            raise TimeoutError(f"raw Celery: fewer than {length} chords done after {timeout} s")
        time.sleep(RAW_CHECK_EVERY)
