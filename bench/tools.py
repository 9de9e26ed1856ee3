"""The benchmark's tools, and the raw Celery tasks of its first baseline.

Workers load this module through ``TOOLFAN_HANDLERS=bench.tools``: the two
``@tool`` functions are what toolfan runs; the ``bench.*`` tasks are the same work as
bare Celery tasks (no ledger, no HTTP), so the engine's ceiling is measured by the very
same worker processes, pool and concurrency; ``bench.raw_ledger_noop`` adds the ledger alone,
and ``bench.floor_call`` with ``bench.floor_submit`` do the least the contract asks (the floor).
"""

from __future__ import annotations

import json
import os
import time
from functools import cache

import httpx
import redis
from celery import shared_task
from celery.signals import worker_init

from handlers import Allow, CallContext, tool

#: What every bench call returns: short, so output handling costs next to nothing.
OUTPUT = "ok"
RAW_NOOP = "bench.raw_noop"
RAW_IO = "bench.raw_io"
RAW_COLLECT = "bench.raw_collect"
RAW_LEDGER_NOOP = "bench.raw_ledger_noop"
FLOOR_CALL = "bench.floor_call"
FLOOR_SUBMIT = "bench.floor_submit"
FLOOR_RUNS_SUBMIT = "bench.floor_runs_submit"


@tool(timeout=10)
def bench_noop() -> str:
    """Return at once: what remains is toolfan's own cost per call."""
    return OUTPUT


def allow_all(tool_name: str, args: dict[str, object], ctx: CallContext) -> Allow:
    """A policy that lets every call through: its cost is the policy machinery's own."""
    return Allow()


@tool(timeout=10, authorize=allow_all)
def bench_noop_policy() -> str:
    """The no-op tool under a policy (the bench's features phase)."""
    return OUTPUT


@tool(timeout=10, requires_approval=True)
def bench_noop_approved() -> str:
    """The no-op tool needing approval; the bench approves each call as it is asked."""
    return OUTPUT


#: The error every ``bench_fail`` call raises: the soak checks it comes back as a failure.
FAILURE = "bench_fail always fails"


@tool(timeout=10)
def bench_fail() -> str:
    """Raise: a failing call must be answered once, as a failure, like any other call."""
    raise RuntimeError(FAILURE)


@tool(timeout=10)
def bench_io(ms: int = 50) -> str:
    """Sleep ``ms`` milliseconds, like a call waiting for a remote service.

    Args:
        ms: How long to wait, in milliseconds.
    """
    time.sleep(ms / 1000)
    return OUTPUT


@cache
def _redis() -> redis.Redis:
    """One client per worker process, made on first use (after the pool's fork)."""
    return redis.Redis.from_url(os.environ["TOOLFAN_REDIS_URL"])


@shared_task(name=RAW_NOOP)
def raw_noop() -> str:
    """The no-op call as a bare Celery task."""
    return OUTPUT


@shared_task(name=RAW_LEDGER_NOOP)
def raw_ledger_noop(batch: str, call: str) -> str:
    """The no-op call as a bare task that keeps toolfan's record of it, and nothing more.

    The ledger's ``begin`` before and ``finish`` after, the same scripts ``execute`` runs
    (the guarantees that a call runs at most once and that a redelivery gets its saved
    result): what those two round trips cost, apart from everything else toolfan does.
    """
    from handlers.result import CallResult
    from tasks.ledger import CallRef
    from tasks.runtime import get_ledger
    from tasks.submit import DEFAULT_SOURCE

    ledger = get_ledger(DEFAULT_SOURCE)
    ref = CallRef(batch, "turn", call)
    ledger.begin(ref, "bench_noop", "raw")
    ledger.finish(ref, CallResult.ok(OUTPUT))
    return OUTPUT


@worker_init.connect
def _join_floor_chords(**kwargs: object) -> None:
    """Have the worker join the floor's chords as toolfan's own.

    So the floor stays the least any implementation does; raw Celery's chords (and raw +
    ledger's) keep Celery's join. Done as the worker starts: importing ``tasks`` here would
    load toolfan's app into the bench's own process.
    """
    from tasks.join import join_chords_of

    join_chords_of(FLOOR_CALL)


@shared_task(name=FLOOR_CALL)
def floor_call(session: str, turn: str, call: str, ms: int = 0) -> list[str]:
    """A bench call (a no-op, or a ``ms`` sleep) whose result is saved once, and nothing more.

    One ledger write, the ``finish`` script toolfan runs: the least "a result is saved before
    the task returns" can cost. No ``begin`` (a first delivery of an idempotent call needs
    no read), no validation, no context, no timeout, no log line, no metrics.
    """
    from handlers.result import CallResult
    from tasks.ledger import CallRef
    from tasks.runtime import get_ledger
    from tasks.submit import DEFAULT_SOURCE

    if ms:
        time.sleep(ms / 1000)
    get_ledger(DEFAULT_SOURCE).finish(CallRef(session, turn, call), CallResult.ok(OUTPUT))
    return [turn, call, OUTPUT]


@cache
def _api() -> httpx.Client:
    """One API client per worker process (the bench's stand-in, from the worker's settings)."""
    return httpx.Client(
        base_url=os.environ["OPENAI_BASE_URL"],
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "OpenAI-Beta": "agents=v1",
        },
        timeout=30,
    )


@shared_task(name=FLOOR_SUBMIT)
def floor_submit(results: list[list[str]], session: str) -> None:
    """Chord callback: the batch's results in one POST, with an idempotency key, nothing more.

    The event, its body and the session's path segment are built by toolfan's own helpers,
    so the floor sends exactly what toolfan's submit sends, any id escaped as it is there.
    """
    from dispatcher.client import events_body, path_segment
    from dispatcher.models import tool_result_event

    events = [tool_result_event(t, c, success=True, output=o) for t, c, o in results]
    _api().post(
        f"/agents/sessions/{path_segment(session)}/events",
        content=events_body(events),
        headers={"Idempotency-Key": f"floor-{session}", "Content-Type": "application/json"},
    ).raise_for_status()


@shared_task(name=FLOOR_RUNS_SUBMIT)
def floor_runs_submit(results: list[list[str]], thread: str, run: str) -> None:
    """Chord callback of the runs floor: the phase's outputs in one ``submit_tool_outputs``.

    The run's path is built by toolfan's own helper, as its source builds it.
    """
    from dispatcher.client import path_segment

    outputs = [{"tool_call_id": call, "output": output} for _, call, output in results]
    _api().post(
        f"/threads/{path_segment(thread)}/runs/{path_segment(run)}/submit_tool_outputs",
        content=json.dumps({"tool_outputs": outputs, "stream": False}),
        headers={"Content-Type": "application/json", "OpenAI-Beta": "assistants=v2"},
    ).raise_for_status()


@shared_task(name=RAW_IO)
def raw_io(ms: int = 50) -> str:
    """The I/O-bound call as a bare Celery task."""
    time.sleep(ms / 1000)
    return OUTPUT


@shared_task(name=RAW_COLLECT)
def raw_collect(results: list[str], key: str, published_at: float) -> None:
    """Chord callback: record when the session's chord finished, in one Redis command.

    The bench reads the list to time the chords; it subtracts these commands (one per
    session) from the baseline's count, since toolfan's ``submit`` has no such write.
    """
    _redis().rpush(key, json.dumps([published_at, time.time(), len(results)]))
