"""Checking the outcome: every call answered once, no non-idempotent side effect twice.

Verification reads only what the outside world saw: the batches the emulator accepted
(idempotent replays excluded) and the side-effect counters the tools kept. It never asks
the ledger, which is the thing under test.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emulator import AcceptedBatch, RequestRecord
from tests.chaos.plan import PlannedCall, PlannedSession

TOOL_RESULT = "agent.session.input.tool_result"
#: Request outcomes the emulator records for a fault it injected.
API_FAULT_OUTCOMES = ("error", "throttle", "lost")


@dataclass
class Faults:
    """Every fault injected: kills counted as they happened, API faults as recorded."""

    child_kills: int = 0
    worker_kills: int = 0
    api: Counter[str] = field(default_factory=Counter)

    @property
    def api_total(self) -> int:
        """Faulted API requests (500, 429, lost 202)."""
        return sum(self.api[o] for o in API_FAULT_OUTCOMES)

    @property
    def total(self) -> int:
        """Every injected fault."""
        return self.child_kills + self.worker_kills + self.api_total

    def count_requests(self, requests: Sequence[RequestRecord]) -> None:
        """Count the faulted requests among the emulator's request log."""
        self.api = Counter(r.outcome for r in requests if r.outcome in API_FAULT_OUTCOMES)


@dataclass
class Tally:
    """The figures of one run; ``ok`` when exactly-once held everywhere."""

    sessions: int = 0
    runs: int = 0
    calls: int = 0
    faults: Faults = field(default_factory=Faults)
    lost: int = 0
    duplicated: int = 0
    rerun: int = 0
    wrong: int = 0
    late: int = 0
    idempotent_reruns: int = 0
    reconciled: int = 0
    failed: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing lost, answered twice or late, no side effect repeated, nothing wrong."""
        return not (self.lost or self.duplicated or self.rerun or self.wrong or self.late)

    def line(self) -> str:
        """The one line the run is judged by."""
        return (
            f"chaos: {self.sessions:,} sessions ({self.runs:,} of them runs), "
            f"{self.calls:,} calls, "
            f"{self.faults.total:,} faults injected, {self.lost:,} lost, "
            f"{self.duplicated:,} duplicated, {self.rerun:,} re-run side effects, "
            f"{self.late:,} late"
        )

    def details(self, seed: int, elapsed: float) -> str:
        """The informational second line: what the faults were and what they caused."""
        f = self.faults
        return (
            f"chaos: seed {seed}, {elapsed:.1f} s; faults: {f.child_kills} pool processes "
            f"and {f.worker_kills} workers killed, {f.api['error']} API 500s, "
            f"{f.api['throttle']} 429s, {f.api['lost']} lost 202s; "
            f"{self.idempotent_reruns} idempotent calls re-run after a kill (allowed), "
            f"{self.reconciled} charges reconciled, {self.failed} calls answered with an error, "
            f"{self.wrong} wrong answers"
        )


def run_key(thread_id: str, run_id: str) -> str:
    """The key a seeded run is known by, beside session ids."""
    return f"run:{thread_id}:{run_id}"


@dataclass(frozen=True)
class RunBatch:
    """One accepted submit of a run, shaped as a session's batch for the same checks."""

    session_id: str
    events: list[dict[str, object]]
    received_at: float


def run_batches(state: Any, seeded: Mapping[str, PlannedSession]) -> list[RunBatch]:
    """Each run's accepted submits as batches: an output ``{"error": ...}`` is a failure."""
    turn_of = {
        key: {c.action["call_id"]: c.action["turn_id"] for c in s.calls}
        for key, s in seeded.items()
        if s.run
    }
    batches = []
    for submit in state.submits():
        key = run_key(submit["thread_id"], submit["run_id"])
        turns = turn_of.get(key, {})
        events = [_event(turns.get(o["tool_call_id"], ""), o) for o in submit["tool_outputs"]]
        batches.append(RunBatch(key, events, submit["received_at"]))
    return batches


def _event(turn: str, output: Mapping[str, Any]) -> dict[str, object]:
    text = str(output["output"])
    try:
        error = json.loads(text)
    except ValueError:
        error = None
    base: dict[str, object] = {
        "type": TOOL_RESULT,
        "turn_id": turn,
        "call_id": output["tool_call_id"],
    }
    if isinstance(error, dict) and set(error) == {"error"}:
        return {**base, "success": False, "error": error["error"]}
    return {**base, "success": True, "output": text}


def answers(batches: Sequence[AcceptedBatch]) -> Counter[tuple[str, str, str]]:
    """How many times each (session, turn, call) was answered across accepted batches."""
    return Counter(
        (b.session_id, e.get("turn_id", ""), e.get("call_id", ""))
        for b in batches
        for e in b.events
    )


def verify(
    seeded: Mapping[str, PlannedSession],
    batches: Sequence[AcceptedBatch],
    counters: Mapping[str, int],
    faults: Faults,
) -> Tally:
    """Compare what was seeded with what was answered and what really ran."""
    tally = Tally(sessions=len(seeded), faults=faults)
    tally.calls = sum(len(s.calls) for s in seeded.values())
    tally.runs = sum(1 for s in seeded.values() if s.run)
    answered = answers(batches)
    per_session = Counter(b.session_id for b in batches)
    events = {
        (b.session_id, e.get("turn_id"), e.get("call_id")): e for b in batches for e in b.events
    }
    for sid, session in seeded.items():
        _check_session(tally, sid, session, per_session[sid], answered, events, counters)
    strangers = set(per_session) - set(seeded)
    for sid in sorted(strangers):
        tally.wrong += 1
        tally.problems.append(f"session {sid}: answered but never seeded")
    for b in batches:
        for e in b.events:
            if e.get("type") != TOOL_RESULT:
                tally.wrong += 1
                tally.problems.append(f"session {b.session_id}: answered with {e.get('type')}")
    return tally


def _check_session(
    tally: Tally,
    sid: str,
    session: PlannedSession,
    batch_count: int,
    answered: Counter[tuple[str, str, str]],
    events: Mapping[tuple[str, str | None, str | None], dict[str, object]],
    counters: Mapping[str, int],
) -> None:
    if not session.calls and batch_count:
        tally.wrong += 1
        tally.problems.append(f"session {sid}: approval requests only, yet got a batch")
    if batch_count > (len(session.phases()) if session.run else 1):
        tally.duplicated += 1
        tally.problems.append(f"session {sid}: {batch_count} accepted batches")
    expected = {(sid, *c.pair) for c in session.calls}
    for key in {k for k in answered if k[0] == sid} - expected:
        tally.wrong += 1
        tally.problems.append(f"session {sid}: answer for an unknown call {key[1:]}")
    for call in session.calls:
        times = answered[(sid, *call.pair)]
        if times == 0:
            tally.lost += 1
            tally.problems.append(f"session {sid}: call {call.pair} never answered")
            continue
        if times > 1:
            tally.duplicated += 1
            tally.problems.append(f"session {sid}: call {call.pair} answered {times} times")
        _check_call(tally, sid, call, events[(sid, *call.pair)], counters)


def _check_call(
    tally: Tally,
    sid: str,
    call: PlannedCall,
    event: Mapping[str, object],
    counters: Mapping[str, int],
) -> None:
    """Side effects: a charge runs at most once, and a success means it did run."""
    success = bool(event.get("success"))
    tally.failed += not success
    if call.counter is None:
        return
    runs = counters.get(call.counter, 0)
    if call.idempotent:
        tally.idempotent_reruns += runs > 1
        if success and runs == 0:
            tally.wrong += 1
            tally.problems.append(f"session {sid}: {call.pair} answered but never ran")
        return
    if runs > 1:
        tally.rerun += 1
        tally.problems.append(f"session {sid}: charge {call.pair} ran {runs} times")
    tally.reconciled += '"reconciled":true' in str(event.get("output", ""))
    if success and runs == 0:
        tally.wrong += 1
        tally.problems.append(f"session {sid}: charge {call.pair} answered but never ran")
