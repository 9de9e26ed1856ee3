"""The soak's load: sessions arriving as a Poisson process, and their exactly-once tally.

The load is open-loop: sessions arrive at their scheduled times whatever the answers do,
so a slowdown shows as a longer time to answer instead of a lighter load. Each session is
planned up front (its calls and whether each must succeed), so the tally checks every
answer from the outside, against the plan, never against the ledger under test. The
other sources of the load (``soak_runs``, ``soak_inline``) arrive the same way
(:class:`Arrivals`) and draw their calls from the same mix (:func:`draw_calls`).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from bench.config import IO_TOOL, NOOP_TOOL
from bench.emu import JSON, Emulator

P = TypeVar("P")
K = TypeVar("K")

FAIL_TOOL = "bench_fail"
TOOL_RESULT = "agent.session.input.tool_result"
#: Tools of one call and their weights: mostly no-op, a quarter 50 ms of I/O, a few failing.
TOOL_WEIGHTS: dict[str, float] = {NOOP_TOOL: 0.70, IO_TOOL: 0.27, FAIL_TOOL: 0.03}
#: Calls per session and their weights (mean 2.5): most alone, some several, a few many.
CALLS_WEIGHTS: dict[int, float] = {1: 0.5, 2: 0.15, 3: 0.15, 4: 0.1, 8: 0.1}
#: Share of sessions with ids a careless client would mangle (separators, braces, Unicode).
HOSTILE_SHARE = 0.02
IO_MS = 50


@dataclass(frozen=True)
class Planned:
    """One session to seed: its body, and per call id whether the answer must be a success."""

    body: JSON
    expect: dict[str, bool]

    @property
    def calls(self) -> int:
        """Function calls the session waits for."""
        return len(self.expect)


@dataclass(frozen=True)
class Seeded:
    """A planned session as seeded: its id and the server time it became pending."""

    session_id: str
    at: float
    plan: Planned


def draw_count(rng: random.Random) -> int:
    """Calls of one answer (a session, a run's phase, a batch), from :data:`CALLS_WEIGHTS`."""
    return rng.choices(list(CALLS_WEIGHTS), weights=list(CALLS_WEIGHTS.values()))[0]


def draw_calls(rng: random.Random, count: int) -> list[tuple[str, JSON]]:
    """``count`` calls of the mix: each tool's name and arguments, from :data:`TOOL_WEIGHTS`."""
    names = [
        rng.choices(list(TOOL_WEIGHTS), weights=list(TOOL_WEIGHTS.values()))[0]
        for _ in range(count)
    ]
    return [(name, {"ms": IO_MS} if name == IO_TOOL else {}) for name in names]


def plan_session(rng: random.Random, n: int) -> Planned:
    """One session of the mix; ``n`` makes hostile ids unique."""
    count = draw_count(rng)
    hostile = rng.random() < HOSTILE_SHARE
    turn = f"t {n}:{{ü}}/%" if hostile else "t1"
    calls, expect = [], {}
    for i, (name, arguments) in enumerate(draw_calls(rng, count)):
        call_id = f"c{i}:{{x}}/ü %2F~" if hostile else f"c{i}"
        calls.append({"name": name, "arguments": arguments, "turn_id": turn, "call_id": call_id})
        expect[call_id] = name != FAIL_TOOL
    body: JSON = {"function_calls": calls}
    if hostile:
        body["session_id"] = f"sess_soak/{n}:{{ü}} %2F~\t"
    return Planned(body, expect)


@dataclass
class Problems:
    """What every tally counts: calls planned and answered, and what it found wrong.

    ``failures`` counts the calls of the failing tool answered as failures; ``duplicated``
    answers given more than once; ``wrong`` answers with the other outcome than planned
    (or unasked for); ``missing`` answers never given; ``problems`` the first few, described.
    """

    calls: int = 0
    answered: int = 0
    failures: int = 0
    duplicated: int = 0
    wrong: int = 0
    missing: int = 0
    problems: list[str] = field(default_factory=list)

    def _problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)

    def _once(self, count: int, what: str) -> bool:
        """Count ``what`` missing (then False) or duplicated by how many answers it had."""
        if count == 0:
            self.missing += 1
            self._problem(f"{what} never answered")
            return False
        if count > 1:
            self.duplicated += 1
            self._problem(f"{what} answered {count} times")
        return True

    @property
    def errors(self) -> int:
        """Answers lost, given twice, or wrong."""
        return self.missing + self.duplicated + self.wrong


@dataclass
class Tally(Problems):
    """Sessions and calls answered, from the emulator's accepted batches (replays excluded).

    ``duplicated`` counts sessions with more than one accepted batch or a call answered more
    than once; ``wrong`` calls answered with the other outcome than planned (or unasked for);
    ``missing`` sessions or calls never answered.
    """

    sessions: int = 0
    hostile: int = 0

    def add(self, seeded: Sequence[Seeded], batches: Sequence[JSON]) -> None:
        """Check one epoch's sessions against the batches the emulator accepted for them."""
        by_session: dict[str, list[JSON]] = {}
        for batch in batches:
            by_session.setdefault(batch["session_id"], []).append(batch)
        for s in seeded:
            self.sessions += 1
            self.calls += s.plan.calls
            self.hostile += "session_id" in s.plan.body
            self._check(s, by_session.pop(s.session_id, []))
        for sid in by_session:
            self._problem(f"a batch for a session never seeded: {sid!r}")
            self.wrong += 1

    def _check(self, s: Seeded, batches: list[JSON]) -> None:
        if not self._once(len(batches), f"session {s.session_id!r}"):
            return
        events = [e for b in batches for e in b["events"] if e.get("type") == TOOL_RESULT]
        seen = Counter(e["call_id"] for e in events)
        for call_id in s.plan.expect:
            if seen[call_id] == 0:
                self.missing += 1
                self._problem(f"call {call_id!r} of {s.session_id!r} never answered")
        for event in events:
            call_id = event["call_id"]
            if call_id not in s.plan.expect or event.get("success") is not s.plan.expect[call_id]:
                self.wrong += 1
                self._problem(f"call {call_id!r} of {s.session_id!r}: unexpected {event!r}")
            elif seen[call_id] > 1:
                self.duplicated += 1
            self.answered += 1
            self.failures += event.get("success") is False

    def to_json(self) -> dict[str, Any]:
        """The tally as data."""
        return {
            "sessions": self.sessions,
            "calls": self.calls,
            "answered_calls": self.answered,
            "failures_answered": self.failures,
            "hostile_sessions": self.hostile,
            "duplicated": self.duplicated,
            "wrong": self.wrong,
            "missing": self.missing,
            "problems": self.problems,
        }


class Arrivals(threading.Thread, Generic[P, K]):
    """Sends planned arrivals at Poisson times on its own thread, and keeps what they gave.

    Every source of the soak's load is one: sessions seeded in the emulator, runs seeded and
    watched, ``run_tool_calls`` batches. :meth:`pause` stops the clock as well as the
    sending (an epoch's drain), so the load resumes at the same rate without a burst of
    the arrivals the pause would have missed. A rate of zero sends nothing (a source the
    options leave out).

    Args:
        name: The thread's name.
        rate: Arrivals per second.
        seed: Seed of the arrivals and of the plans.
    """

    def __init__(self, name: str, rate: float, seed: int) -> None:
        super().__init__(name=name, daemon=True)
        self.rng = random.Random(seed)  # noqa: S311 - a load shape, not cryptography
        self.rate = rate
        self.lock = threading.Lock()
        self.kept: list[K] = []
        self._run = threading.Event()
        self._idle = threading.Event()
        self._done = threading.Event()
        self._n = 0
        self.error: BaseException | None = None

    def plan(self, n: int) -> P:
        """The ``n``-th arrival (from 1), drawn from :attr:`rng`."""
        raise NotImplementedError

    def send(self, plans: list[P]) -> None:
        """Send the arrivals that are due together; :meth:`keep` what comes of them."""
        raise NotImplementedError

    def release(self) -> None:
        """Close what the thread holds, once it ends."""

    def keep(self, items: Iterable[K]) -> None:
        """Keep items for :meth:`take` (from any thread)."""
        with self.lock:
            self.kept += items

    def run(self) -> None:
        """Send until stopped; a failure is kept for the caller to raise."""
        try:
            self._loop()
        except BaseException as exc:  # handed to the main thread
            self.error = exc
        finally:
            self._idle.set()
            self.release()

    def _loop(self) -> None:
        due = time.monotonic()
        while not self._done.is_set():
            if not self._run.is_set() or self.rate <= 0:
                self._idle.set()
                self._run.wait(0.2)
                due = time.monotonic()
                continue
            self._idle.clear()
            due += self.rng.expovariate(self.rate)
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            plans = [self._next()]
            while due + (gap := self.rng.expovariate(self.rate)) <= time.monotonic():
                due += gap  # every arrival already due goes in the same request
                plans.append(self._next())
            self.send(plans)

    def _next(self) -> P:
        self._n += 1
        return self.plan(self._n)

    def resume(self) -> None:
        """Start (or go on) sending."""
        self._run.set()

    def pause(self, timeout: float = 30) -> None:
        """Stop sending and wait until no send is in flight."""
        self._run.clear()
        self._idle.clear()
        self._idle.wait(timeout)

    def stop(self) -> None:
        """End the thread."""
        self._done.set()
        self._run.set()
        self.join(30)

    def take(self) -> list[K]:
        """What was kept since the last call (the caller keeps it)."""
        with self.lock:
            taken, self.kept = self.kept, []
        return taken


class Seeder(Arrivals[Planned, Seeded]):
    """Seeds planned sessions at Poisson arrival times on its own connection.

    Args:
        origin: The emulator's ``http://host:port``.
        rate: Calls per second to offer (sessions arrive at ``rate`` / mean calls).
        seed: Seed of the arrivals and of the mix.
    """

    def __init__(self, origin: str, rate: float, seed: int) -> None:
        super().__init__("soak-seeder", rate / mean_calls(), seed)
        self.emu = Emulator(origin)

    def plan(self, n: int) -> Planned:
        """One session of the mix."""
        return plan_session(self.rng, n)

    def send(self, plans: list[Planned]) -> None:
        """Seed the sessions (in bulk requests)."""
        for chunk in self.emu.seed([p.body for p in plans]):
            self.keep(Seeded(sid, chunk.at, p) for sid, p in zip(chunk.ids, plans, strict=True))

    def release(self) -> None:
        """Close the emulator client."""
        self.emu.close()


def mean_calls() -> float:
    """Calls per session of the mix, on average."""
    total = sum(CALLS_WEIGHTS.values())
    return sum(k * w for k, w in CALLS_WEIGHTS.items()) / total


def plan_burst(count: int, seed: int, index: int = 0) -> list[Planned]:
    """``count`` sessions of the mix, for calibration burst ``index`` (from 0).

    Hostile ids are numbered below zero (the load's are above), each burst's apart: a
    session id that came again would find the last burst's answer in the ledger.
    """
    rng = random.Random(seed)  # noqa: S311 - a load shape
    return [plan_session(rng, -(index * count + i) - 1) for i in range(count)]


def answer_times(seeded: Iterable[Seeded], batches: Iterable[JSON]) -> list[tuple[float, float]]:
    """(seeded at, seconds to answer) of each session's first accepted batch."""
    first: dict[str, float] = {}
    for batch in batches:
        first.setdefault(batch["session_id"], float(batch["received_at"]))
    return [(s.at, first[s.session_id] - s.at) for s in seeded if s.session_id in first]
