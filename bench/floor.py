"""The floor: the least work the contract asks of any implementation, on toolfan's workers.

Raw Celery chords do less than the contract asks: they find no sessions, save no result and
answer no API. So a throughput target stated against them may lie beyond what any correct
implementation can reach on the same machine. The floor measures that limit. Per session
it does only what cannot be left out:

* find the waiting sessions with the API's list (one pass, pages of 100: the API has no
  status filter), read by this process as a poller would;
* one chord of one task per call, on the function's queue, each saving its result in the
  ledger before it returns (invariant 3's one write; no read first, no claim, no log line),
  joined by toolfan's join (:mod:`tasks.join`), the leanest there is here;
* one POST of the batch's results, with an idempotency key, from the chord's callback.

It skips everything else toolfan does (claims, dispatch records, argument validation,
the tool's context, timeouts, metrics, logs), so toolfan cannot beat it: its ratio to raw
Celery is the ceiling of toolfan's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from bench.config import Workload
from bench.emu import LIST_PATH, Emulator, answer_times, session_body
from bench.engine import answered_extra, forget
from bench.figures import FLOOR, SPLIT, Measurement
from bench.measure import CpuSplit, Window
from bench.stack import SUBMIT_QUEUE, BenchStack
from dispatcher.devstack import Service

#: Sessions per list page, the API's largest (as toolfan's poller asks).
PAGE = 100


def run_floor(
    stack: BenchStack,
    emu: Emulator,
    workload: Workload,
    workers: list[Service],
    sessions: int | None = None,
) -> Measurement:
    """Seed the sessions at once; list, publish and wait until every one has an accepted batch.

    Throughput counts as toolfan's does: from the first request the API sees to the last
    accepted batch. CPU counts the workers and this process's listing and publishing.
    """
    count = sessions or workload.sessions
    emu.reset()
    window = Window(stack.redis(), [w.proc.pid for w in workers])
    split = CpuSplit([w.proc.pid for w in workers], {"api": stack.emulator_pid})
    seeded = emu.seed([session_body(workload)] * count)
    cpu = time.process_time()
    published = _publish(stack.origin, stack.env["OPENAI_API_KEY"], workload)
    publish_cpu = time.process_time() - cpu
    batches = emu.wait_batches(count, stack.config.timeout)
    closed = window.close()
    calls = count * workload.calls
    _, seconds, latency = answer_times(emu, seeded, batches)
    return Measurement(
        system=FLOOR,
        workload=workload.name,
        sessions=count,
        calls=calls,
        seconds=seconds,
        latency=latency,
        redis_commands_per_call=closed.total_commands / calls,
        cpu_seconds_per_call=(closed.cpu + publish_cpu) / calls,
        extra={
            **answered_extra(batches, closed),
            "published_sessions": published,
            "publish_cpu_seconds": publish_cpu,
            SPLIT: {
                **split.per_call(calls),
                "publisher": 1000 * publish_cpu / calls,
            },
        },
    )


def _publish(origin: str, api_key: str, workload: Workload) -> int:
    """One listing pass; a chord per waiting session as its page arrives. Returns how many."""
    from celery import chord

    from bench import tools
    from tasks.submit import UNSTORED  # no result stored: toolfan sends its calls so too

    headers = {"Authorization": f"Bearer {api_key}", "OpenAI-Beta": "agents=v1"}
    published = 0
    with httpx.Client(base_url=origin, headers=headers, timeout=30) as api:
        for session, calls in _waiting(api):
            header = [
                tools.floor_call.si(session, turn, call, **arguments).set(
                    queue=workload.queue, **UNSTORED
                )
                for turn, call, arguments in calls
            ]
            body = tools.floor_submit.s(session).set(queue=SUBMIT_QUEUE, **UNSTORED)
            forget(chord(header)(body))
            published += 1
    return published


def _waiting(api: httpx.Client) -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    """Each session with function calls, page by page: its id, and each call's ids and arguments.

    The arguments come parsed with the page (a JSON value on this API, not a string).
    """
    after: str | None = None
    while True:
        params = {"limit": str(PAGE), "order": "asc", **({"after": after} if after else {})}
        page = api.get(LIST_PATH, params=params).raise_for_status().json()
        for session in page["data"]:
            calls = [
                (action["turn_id"], action["call_id"], action.get("arguments") or {})
                for action in session.get("required_actions") or []
                if action.get("type") == "function_call"
            ]
            if calls:
                yield session["id"], calls
        if not page.get("has_more") or not page["data"]:
            return
        after = page["data"][-1]["id"]
