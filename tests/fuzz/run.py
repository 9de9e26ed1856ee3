"""``python -m tests.fuzz``: hostile sessions through the real path, checked from outside.

Probes what the emulator can serve, plans sessions from one seed (hostile ids, arguments,
function names and tool outputs; see :mod:`tests.fuzz.plan`), starts its own stack (an
in-process emulator, one ``toolfan worker`` and one ``toolfan poll --interval 0.5`` with
default settings; see :mod:`tests.fuzz.stack`), seeds the sessions over a few seconds
while API fault phases come and go, waits (bounded) for every answerable session's batch,
then verifies and prints one line::

    fuzz: 2,000 sessions, 9,731 calls, 0 cross-talk, 0 lost, 0 duplicated, 0 crashes, 0 refused batches

followed by an informational line. Exits 0 only when all five counters are zero, 1 when
not, 2 when the run is void (its Redis databases were touched by someone else). Progress
and the problems, grouped with one example each, go to stderr; the service logs and
``problems.txt`` are kept (and named) when a run fails.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dispatcher.devstack import until_stopped
from tests.fuzz.faults import FaultPhase, describe_phases, plan_faults
from tests.fuzz.ids import show
from tests.fuzz.logscan import scan
from tests.fuzz.plan import PlannedSession, plan_sessions
from tests.fuzz.probe import Capabilities, probe, unreadable
from tests.fuzz.report import details, problems, write_problems
from tests.fuzz.stack import FuzzStack, StackConfig
from tests.fuzz.verify import Tally, verify
from tests.owned import DatabasesClobbered

Progress = Callable[[str], None]
PROGRESS_EVERY = 5.0
#: Seconds to wait for a new batch once a service has died (nothing new can come).
DEAD_STALL = 5.0


@dataclass(frozen=True)
class FuzzConfig:
    """One fuzz run.

    Attributes:
        sessions: Sessions to seed.
        seed: Seeds the plan, the fault phases and the emulator's fault dice.
        seed_window: Seconds over which the sessions are seeded (default 0.01 s each, 2 s
            at least).
        fault_window: Seconds of API fault phases from the start (default: the seeding
            window plus 0.04 s per session, 6 s at least, which covers most answers);
            none after it, so the settling is clean.
        settle_timeout: At most this many seconds of waiting for answers after seeding.
        stall_timeout: Stop waiting early once no batch has arrived for this long (with
            default settings a broken dispatch is only redone after a lease of minutes).
        quiet_period: Seconds to keep running after the last answer, for late duplicates.
        broker_db: Redis database of the broker; flushed at start and at the end.
        ledger_db: Redis database of the ledger; flushed likewise.
        without: ``axis=kind`` labels to leave out (e.g. to look past a known crash).
        keep_logs: Keep the logs even when the run passes.
    """

    sessions: int = 300
    seed: int = 1
    seed_window: float | None = None
    fault_window: float | None = None
    settle_timeout: float = 120.0
    stall_timeout: float = 20.0
    quiet_period: float = 3.0
    broker_db: int = 6
    ledger_db: int = 7
    without: frozenset[str] = frozenset()
    keep_logs: bool = False

    @property
    def seeding(self) -> float:
        """Seconds over which sessions are seeded."""
        return self.seed_window if self.seed_window is not None else max(2.0, 0.01 * self.sessions)

    @property
    def faulting(self) -> float:
        """Seconds of fault phases."""
        if self.fault_window is not None:
            return self.fault_window
        return self.seeding + max(6.0, 0.04 * self.sessions)


@dataclass
class FuzzResult:
    """The figures, how long the run took, and where its logs are if they were kept."""

    tally: Tally
    elapsed: float
    faults: str
    skipped: list[str] = field(default_factory=list)
    logs: Path | None = None
    plan: list[PlannedSession] = field(default_factory=list)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Run:
    """One run in progress: the stack, what was seeded when, and the fault phases."""

    def __init__(self, config: FuzzConfig, caps: Capabilities, progress: Progress) -> None:
        self.config = config
        self.caps = caps
        self.progress = progress
        rng = random.Random(config.seed)
        self.plan = plan_sessions(
            rng, config.sessions, caps.alphabet, caps.raw_actions, set(config.without)
        )
        self.phases = plan_faults(random.Random(config.seed * 7919 + 3), config.faulting)
        self.seeded: list[PlannedSession] = []
        self.seeded_at: dict[str, float] = {}
        self.unseedable: list[str] = []
        self.outcome = "timeout"  # of the wait for answers: answered, stalled or timeout
        self._last_change: float | None = None
        self._batches = 0

    def skipped(self) -> list[str]:
        """What this run left out, and why, for the informational line."""
        notes = self.caps.notes()
        if self.unseedable:
            notes.append(f"{len(self.unseedable)} sessions the emulator refused to seed")
        if self.config.without:
            notes.append(f"without {', '.join(sorted(self.config.without))}")
        return notes

    def play(self, stack: FuzzStack) -> None:
        """Seed the sessions in waves over the seeding window while the fault phases run;
        once all are seeded, watch the answers until the last phase ends (or until all
        are answered, or nothing has come for the stall timeout)."""
        start = time.monotonic()
        waves = max(1, int(self.config.seeding / 0.25))
        events: list[tuple[float, int, FaultPhase | None]] = [
            (self.config.seeding * w / waves, w, None) for w in range(waves)
        ]
        events += [(p.at, -1, p) for p in self.phases]
        for at, wave, phase in sorted(events, key=lambda e: e[0]):
            if self._all_seeded():
                self.outcome = self._wait_answers(stack, start + at - time.monotonic())
                if self.outcome != "timeout":
                    break
            elif (delay := start + at - time.monotonic()) > 0:
                time.sleep(delay)
            if phase is not None:
                stack.state.set_faults(**(phase.knobs or {}))
            else:
                size = len(self.plan)
                self._seed(stack, self.plan[size * wave // waves : size * (wave + 1) // waves])
        stack.state.set_faults()

    def _all_seeded(self) -> bool:
        return len(self.seeded) + len(self.unseedable) == len(self.plan)

    def _seed(self, stack: FuzzStack, sessions: list[PlannedSession]) -> None:
        for session in sessions:
            try:
                create = functools.partial(
                    stack.state.create_session,
                    session.actions,
                    session_id=session.session_id,
                    metadata=session.metadata,
                )
                if session.raw_actions:
                    create(raw_actions=session.raw_actions)
                else:  # an emulator without raw actions takes no such argument
                    create()
            except (ValueError, TypeError, RecursionError) as exc:
                self.unseedable.append(f"{session.session_id[:40]!r}: {exc}"[:200])
                continue
            self.seeded.append(session)
            self.seeded_at[session.session_id] = time.time()

    def _wait_answers(self, stack: FuzzStack, timeout: float) -> str:
        """Wait until every seeded session with an answerable call has a batch.

        Returns:
            ``answered``; ``stalled`` once no new batch came for the stall timeout (a few
            seconds only when a service has died), counted across calls; else ``timeout``.
        """
        waiting = {s.session_id for s in self.seeded if s.answerable}
        deadline = time.monotonic() + timeout
        last_report = time.monotonic()
        if self._last_change is None:
            self._last_change = time.monotonic()
        while True:
            current = stack.state.batches()
            done = {b.session_id for b in current} & waiting
            if len(current) != self._batches:
                self._batches, self._last_change = len(current), time.monotonic()
            if done == waiting:
                return "answered"
            dead = [e.service for e in stack.exits()]
            if time.monotonic() - last_report > PROGRESS_EVERY:
                last_report = time.monotonic()
                note = f"; {' and '.join(dead)} exited" if dead else ""
                count = f"{len(done)}/{len(waiting)} sessions, {self._batches} batches"
                self.progress(f"fuzz| answered {count}{note}")
            idle = min(self.config.stall_timeout, DEAD_STALL) if dead else self.config.stall_timeout
            if time.monotonic() - self._last_change > idle:
                self.progress(f"fuzz| no new batch for {idle:.0f} s; verifying what there is")
                return "stalled"
            if time.monotonic() >= deadline:
                return "timeout"
            time.sleep(0.25)

    def settle(self, stack: FuzzStack) -> None:
        """Wait for the answers (bounded), then a quiet period for late duplicates."""
        if self.outcome == "timeout":
            self.outcome = self._wait_answers(stack, self.config.settle_timeout)
        if self.outcome != "answered":
            self.progress("fuzz| not every session was answered; verifying what there is")
        time.sleep(self.config.quiet_period)

    def tally(self, stack: FuzzStack) -> Tally:
        """Note dead services, stop them all, then verify against what the emulator saw."""
        exits = stack.exits()
        stack.stop_services()
        stack.check_databases()
        logs = scan(stack.logs())
        batches, requests = stack.state.batches(), stack.state.requests()
        tally = verify(self.seeded, self.seeded_at, batches, requests, logs, exits)
        self._triage(stack, tally)
        return tally

    def _triage(self, stack: FuzzStack, tally: Tally) -> None:
        """Name the unanswered sessions a standard JSON parser cannot read: they break the
        listing of every client built on one, and with it every session on their page."""
        lost = {p.session_id or "" for p in tally.problems if p.kind == "session got no batch"}
        assert stack.emulator is not None
        by_id = {s.session_id: s for s in self.seeded}
        for sid, why in unreadable(stack.emulator.base_url, sorted(lost)).items():
            labels = sorted({lab for c in by_id[sid].calls for lab in c.labels if "args=" in lab})
            text = f"session {show(sid)} [{' '.join(labels)}] is JSON json.loads refuses: {why}"
            tally.add("note", "unreadable by json.loads", text, sid)


def run_fuzz(config: FuzzConfig, progress: Progress = _stderr) -> FuzzResult:
    """The whole campaign; the stack is gone when this returns."""
    workdir = Path(tempfile.mkdtemp(prefix="toolfan-fuzz-"))
    started = time.monotonic()
    ok = False
    try:
        caps = probe()
        run = Run(config, caps, progress)
        calls = sum(len(s.calls) for s in run.plan)
        progress(f"fuzz| planned {len(run.plan)} sessions, {calls} calls; starting the stack")
        with FuzzStack(StackConfig(workdir, config.broker_db, config.ledger_db)) as stack:
            progress(f"fuzz| stack up in {time.monotonic() - started:.1f} s; logs in {workdir}")
            run.play(stack)
            progress(f"fuzz| {len(run.seeded)} sessions seeded, fault phases over; settling")
            run.settle(stack)
            tally = run.tally(stack)
        ok = tally.ok
        write_problems(tally, workdir)
        logs = None if ok and not config.keep_logs else workdir
        elapsed = time.monotonic() - started
        faults = describe_phases(run.phases)
        return FuzzResult(tally, elapsed, faults, run.skipped(), logs, run.seeded)
    finally:
        if ok and not config.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"fuzz| service logs, problems.txt and answer_times.tsv kept in {workdir}")


def report(result: FuzzResult, seed: int, out: Callable[[str], None] = print) -> None:
    """The summary line and the informational line on ``out``; the problems on stderr."""
    out(result.tally.line())
    out(details(result.tally, seed, result.elapsed, result.faults, result.skipped, result.logs))
    problems(result.tally, result.plan)


def parse_args(argv: Iterable[str] | None = None) -> FuzzConfig:
    """The command line, as a :class:`FuzzConfig`."""
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=300, help="sessions to seed (300)")
    p.add_argument("--seed", type=int, default=1, help="seed of the whole run (1)")
    p.add_argument(
        "--seed-window",
        type=float,
        help="seconds over which to seed the sessions (0.01 s each): a long run should seed "
        "no faster than one worker answers, or it measures a backlog, not hostile input",
    )
    p.add_argument("--settle-timeout", type=float, default=120.0, help="wait for answers (120)")
    p.add_argument(
        "--stall-timeout", type=float, default=20.0, help="stop once idle this long (20)"
    )
    p.add_argument("--dbs", default="6,7", help="broker and ledger Redis databases (6,7)")
    p.add_argument(
        "--without",
        default="",
        help="kinds to leave out, comma-separated, as the report labels them (args=, output=, "
        "name=, family=, unanswerable=; sid=, turn=, call= or ids= drop an id kind everywhere), "
        "e.g. args=raw_bignum,ids=surrogate",
    )
    p.add_argument("--keep-logs", action="store_true", help="keep the service logs")
    a = p.parse_args(list(argv) if argv is not None else None)
    broker_db, ledger_db = (int(n) for n in a.dbs.split(","))
    return FuzzConfig(
        sessions=a.sessions,
        seed=a.seed,
        seed_window=a.seed_window,
        settle_timeout=a.settle_timeout,
        stall_timeout=a.stall_timeout,
        broker_db=broker_db,
        ledger_db=ledger_db,
        without=frozenset(w.strip() for w in a.without.split(",") if w.strip()),
        keep_logs=a.keep_logs,
    )


def main(argv: Iterable[str] | None = None) -> int:
    """Entry point: 0 when all five counters are zero, 1 when not, 2 if the run is void."""
    config = parse_args(argv)
    return until_stopped("fuzz", lambda: _campaign(config))


def _campaign(config: FuzzConfig) -> int:
    """The run and its report, stopped (stack and all) by a SIGTERM or SIGHUP."""
    try:
        result = run_fuzz(config)
    except DatabasesClobbered as exc:
        _stderr(f"fuzz: void run: {exc}")
        return 2
    report(result, config.seed)
    return 0 if result.tally.ok else 1
