"""What the chaos run does, decided up front from one seeded RNG: sessions and faults.

Planning is pure (no processes, no clock), so a seed names one run: the same sessions,
the same calls and the same fault schedule every time. What the processes then make of
it (which call a kill lands on) still varies, which is the point of a chaos run.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from emulator import function_call, mcp_approval_request

#: An unregistered function name: its calls must be answered with "unknown function".
UNKNOWN_FUNCTION = "chaos_missing"
#: Call kinds and their weights in a session.
CALL_KINDS: dict[str, float] = {
    "count": 0.32,
    "slow": 0.25,
    "charge": 0.23,
    "refuse": 0.06,
    "invalid": 0.08,
    "unknown": 0.06,
}

FaultKind = Literal["kill_child", "kill_worker", "api_on", "api_off"]


@dataclass(frozen=True)
class PlannedCall:
    """One function call and what its side-effect counter must show afterwards."""

    action: dict[str, Any]
    counter: str | None = None
    idempotent: bool = True

    @property
    def pair(self) -> tuple[str, str]:
        """The (turn, call) pair that identifies its answer."""
        return self.action["turn_id"], self.action["call_id"]


@dataclass
class PlannedSession:
    """A session to seed: its function calls, plus any approval requests to leave alone.

    With ``run`` set it is seeded as an Assistants run instead, one phase per turn (the
    ``assistants`` source): same calls, same checks, another protocol.
    """

    calls: list[PlannedCall] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    run: bool = False

    def phases(self) -> list[list[dict[str, Any]]]:
        """The run's phases: the calls grouped by turn, in the order the turns appear."""
        turns: dict[str, list[dict[str, Any]]] = {}
        for call in self.calls:
            action = call.action
            entry = {"name": action["name"], "arguments": action["arguments"]}
            turns.setdefault(action["turn_id"], []).append({**entry, "id": action["call_id"]})
        return list(turns.values())

    @property
    def actions(self) -> list[dict[str, Any]]:
        """The required actions to create the session with."""
        return [*self.approvals, *(c.action for c in self.calls)]


@dataclass(frozen=True)
class Fault:
    """One scheduled fault, ``at`` seconds into the injection window."""

    at: float
    kind: FaultKind
    knobs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Wave:
    """Sessions ``start:stop`` of the plan, seeded ``at`` seconds into the window."""

    at: float
    start: int
    stop: int


def plan_call(rng: random.Random, turn: str) -> PlannedCall:
    """One call of a random kind; valid ones with a side effect get their own counter."""
    kind = rng.choices(list(CALL_KINDS), weights=list(CALL_KINDS.values()))[0]
    key = uuid.UUID(int=rng.getrandbits(128)).hex
    if kind == "count":
        return PlannedCall(function_call("chaos_count", {"key": key}, turn_id=turn), key)
    if kind == "slow":
        args = {"key": key, "ms": rng.randint(50, 300)}
        return PlannedCall(function_call("chaos_slow", args, turn_id=turn), key)
    if kind == "charge":
        args = {"key": key, "cents": rng.randint(1, 10_000), "ms": rng.randint(0, 200)}
        return PlannedCall(function_call("chaos_charge", args, turn_id=turn), key, False)
    if kind == "refuse":
        return PlannedCall(function_call("chaos_refuse", {"reason": "no"}, turn_id=turn))
    if kind == "invalid":
        bad = rng.choice([{"key": key, "cents": "lots"}, [key], {"key": key, "extra": 1}])
        return PlannedCall(function_call("chaos_charge", bad, turn_id=turn))
    return PlannedCall(function_call(UNKNOWN_FUNCTION, {"key": key}, turn_id=turn))


def plan_session(rng: random.Random, i: int) -> PlannedSession:
    """2 to 6 calls over one or two turns; a few sessions hold approval requests."""
    roll = rng.random()
    session = PlannedSession()
    if roll < 0.06:
        session.approvals.append(mcp_approval_request(turn_id=f"turn_{i}_approval"))
        if roll < 0.03:
            return session  # approval only: must get no batch at all
    turns = [f"turn_{i}_a", f"turn_{i}_b"] if rng.random() < 0.2 else [f"turn_{i}_a"]
    session.calls = [plan_call(rng, rng.choice(turns)) for _ in range(rng.randint(2, 6))]
    return session


def plan_sessions(rng: random.Random, count: int, runs_share: float = 0.0) -> list[PlannedSession]:
    """The sessions of the run, in seeding order; ``runs_share`` of them become runs.

    Only sessions with calls and no approval request can be runs (the protocol has no
    approvals). The choice uses its own dice, so the sessions stay the same for a seed.
    """
    sessions = [plan_session(rng, i) for i in range(count)]
    pick = random.Random(rng.random())
    for session in sessions:
        eligible = bool(session.calls) and not session.approvals
        session.run = eligible and pick.random() < runs_share
    return sessions


def plan_waves(count: int, window: float, first: float = 0.25) -> list[Wave]:
    """Seed ``first`` of the sessions at once, the rest in one wave a second over ``window``."""
    head = max(1, round(count * first))
    waves = [Wave(0.0, 0, min(head, count))]
    steps = max(1, int(window))
    rest = count - waves[0].stop
    for step in range(steps):
        start = waves[-1].stop
        stop = head + rest * (step + 1) // steps
        if stop > start:
            waves.append(Wave(float(step + 1) * window / steps, start, stop))
    return waves


def api_knobs(rng: random.Random) -> dict[str, Any]:
    """One random phase of API misbehaviour (500s, 429s, lost 202s, latency)."""
    endpoints = rng.choice(
        [
            ["list", "runs"],
            ["events", "submit_outputs"],
            ["list", "events", "runs", "submit_outputs"],
            ["list", "events", "runs", "submit_outputs"],
        ]
    )
    return {
        "error_rate": rng.choice([0.1, 0.2, 0.3]),
        "throttle_rate": rng.choice([0.0, 0.1, 0.2]),
        "retry_after": 0.1,
        "lost_202_rate": rng.choice([0.0, 0.2, 0.4]),
        "latency": rng.choice([0.0, 0.0, 0.05, 0.2]),
        "endpoints": endpoints,
        "seed": rng.randrange(2**31),
    }


def plan_faults(
    rng: random.Random,
    window: float,
    mean_interval: float,
    min_worker_kills: int = 1,
    worker_kill_every: float | None = None,
) -> list[Fault]:
    """Faults at random times over ``window``: mostly child kills, some worker kills and
    API phases (each ended by an ``api_off``, never overlapping), with at least
    ``min_worker_kills`` of the former and one of the latter, so that every kind is
    exercised even in a short run; plus, with ``worker_kill_every``, a whole worker killed
    about that often (an OOM kill, a lost node, ``kubectl delete pod --force``).
    """
    faults: list[Fault] = []
    api_until = 0.0
    t = rng.uniform(0.5, 1.5) * mean_interval
    while t < window:
        kinds: list[FaultKind] = ["kill_child", "kill_worker", "api_on"]
        kind = rng.choices(kinds, weights=[6, 1, 3])[0]
        if kind == "api_on" and t < api_until:
            kind = "kill_child"
        if kind == "api_on":
            api_until = min(window, t + rng.uniform(2.0, 5.0))
            faults += [Fault(t, "api_on", api_knobs(rng)), Fault(api_until, "api_off")]
        else:
            faults.append(Fault(t, kind))
        t += rng.uniform(0.5, 1.5) * mean_interval
    _ensure_worker_kills(rng, faults, min_worker_kills, window)
    if worker_kill_every:
        at = rng.uniform(0.5, 1.0) * worker_kill_every
        while at < window:
            faults.append(Fault(at, "kill_worker"))
            at += rng.uniform(0.75, 1.25) * worker_kill_every
    if not any(f.kind == "api_on" for f in faults):
        at = rng.uniform(0.1, 0.4) * window
        knobs = {**api_knobs(rng), "endpoints": ["list", "events", "runs", "submit_outputs"]}
        faults += [Fault(at, "api_on", knobs), Fault(at + 0.5 * window, "api_off")]
    return sorted(faults, key=lambda f: f.at)


def _ensure_worker_kills(
    rng: random.Random, faults: list[Fault], count: int, window: float
) -> None:
    """Add whole-worker kills until the schedule holds ``count`` of them."""
    while sum(1 for f in faults if f.kind == "kill_worker") < count:
        faults.append(Fault(rng.uniform(0.2, 0.6) * window, "kill_worker"))
