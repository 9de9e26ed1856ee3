"""Seeding sessions, driving pollers and checking the exactly-once promise end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from dispatcher.client import AgentsClient
from dispatcher.loop import run_loop
from dispatcher.poll import Poller, PollSummary
from emulator import EmulatorState, function_call, mcp_approval_request
from tasks.runtime import get_ledger
from tasks.settings import get_settings
from tests.services import ROOT, wait_for


def client() -> AgentsClient:
    return AgentsClient()


def poller() -> Poller:
    """A poller as ``toolfan poll`` builds one: with a reaper of dead workers' calls."""
    from tasks.runtime import new_reaper

    return Poller(client(), get_ledger("agents"), get_settings(), reaper=new_reaper())


@dataclass
class Seeded:
    """What was seeded: function-call sessions and sessions that must stay untouched."""

    calls: dict[str, list[dict]] = field(default_factory=dict)
    untouched: list[str] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)


def mixed_actions(i: int, counters: list[str]) -> list[dict]:
    """Several calls with mixed outcomes; session 0 mod 7 spans two turns."""
    key = uuid.uuid4().hex
    counters.append(key)
    turn = f"turn_{i}_a"
    actions = [
        function_call("add", {"a": i, "b": 1}, turn_id=turn),
        function_call("count", {"key": key}, turn_id=turn),
    ]
    kind = i % 5
    if kind == 1:
        actions.append(function_call("boom", {}, turn_id=turn))
    elif kind == 2:
        actions.append(function_call("add", {"a": "x"}, turn_id=turn))
    elif kind == 3:
        actions.append(function_call("no_such_tool", {}, turn_id=turn))
    elif kind == 4:
        actions.append(function_call("refuse", {"reason": "not today"}, turn_id=turn))
    if i % 7 == 0:
        actions.append(function_call("get_weather", {"city": "Oslo"}, turn_id=f"turn_{i}_b"))
    return actions


def seed(api: EmulatorState, sessions: int, seeded: Seeded | None = None) -> Seeded:
    seeded = seeded or Seeded()
    start = len(seeded.calls)
    for i in range(start, start + sessions):
        actions = mixed_actions(i, seeded.counters)
        created = api.create_session(actions, metadata={"batch": "e2e"})
        seeded.calls[created["id"]] = actions
    return seeded


def seed_untouched(api: EmulatorState, seeded: Seeded) -> None:
    seeded.untouched.append(api.create_session([mcp_approval_request()])["id"])
    seeded.untouched.append(api.create_session([])["id"])


def answered(api: EmulatorState, seeded: Seeded) -> bool:
    done = {b.session_id for b in api.batches()}
    return all(sid in done for sid in seeded.calls)


def check_exactly_once(api: EmulatorState, seeded: Seeded, redis_client) -> None:
    batches = api.batches()
    per_session = Counter(b.session_id for b in batches)
    assert set(per_session) == set(seeded.calls), "a session was not answered, or a stranger was"
    assert max(per_session.values()) == 1, f"sessions answered twice: {per_session.most_common(3)}"
    for batch in batches:
        assert batch.idempotency_key and batch.idempotency_key.startswith("toolfan-")
        expected = {(a["turn_id"], a["call_id"]) for a in seeded.calls[batch.session_id]}
        got = [(e["turn_id"], e["call_id"]) for e in batch.events]
        assert sorted(got) == sorted(expected)
        assert all(e["type"] == "agent.session.input.tool_result" for e in batch.events)
    for key in seeded.counters:
        runs = redis_client.get(f"test:runs:{key}")
        assert runs == "1", f"a side effect ran {runs} times"
    for sid in seeded.untouched:
        assert not api.batches(sid)


def check_posted_once(api: EmulatorState, seeded: Seeded) -> None:
    """Each session's batch was sent under one key and accepted once.

    Extra POSTs may only be retries of that same request (a timeout under load), which
    the API answers as replays; a second dispatch would show up as a second key.
    """
    for sid in seeded.calls:
        posts = api.requests(f"/{sid}/events", method="POST")
        assert len({p.idempotency_key for p in posts}) == 1, f"{sid} sent under two keys"
        assert [p.outcome for p in posts].count("accepted") == 1
        assert {p.outcome for p in posts} <= {"accepted", "replayed", "error", "throttle"}


def results_by_call(api: EmulatorState) -> dict[str, dict]:
    return {e["call_id"]: e for b in api.batches() for e in b.events}


@contextmanager
def poll_loop(interval: float = 0.2) -> Iterator[list[PollSummary]]:
    """``run_loop`` in a thread of the test process; yields the summaries of its passes."""
    summaries: list[PollSummary] = []
    stop = threading.Event()
    p = poller()

    def poll() -> PollSummary:
        summaries.append(p.poll_once())
        return summaries[-1]

    thread = threading.Thread(target=run_loop, args=(interval, lambda line: None, stop, poll))
    thread.start()
    try:
        yield summaries
    finally:
        stop.set()
        thread.join(10)


def poll_until(api: EmulatorState, seeded: Seeded, timeout: float = 90) -> None:
    with poll_loop():
        wait_for(lambda: answered(api, seeded), timeout, "every session to be answered", 0.1)


def settle(seconds: float) -> None:
    """Let late work (retries, lagging sessions, extra polls) happen before counting."""
    time.sleep(seconds)


@contextmanager
def poller_processes(n: int, interval: float) -> Iterator[list[subprocess.Popen[str]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dispatcher.cli", "poll", "--interval", str(interval)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(20)


def total(summaries: list[PollSummary], field_name: str) -> int:
    return sum(getattr(s, field_name) for s in summaries)


def batch_events(api: EmulatorState, sid: str, seconds: float = 60) -> dict[str, dict]:
    """The session's one batch, once it arrives, as its events by call id."""
    wait_for(lambda: api.batches(sid), seconds, "the session's batch")
    (batch,) = api.batches(sid)
    return {e["call_id"]: e for e in batch.events}
