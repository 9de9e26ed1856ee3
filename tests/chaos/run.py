"""``python -m tests.chaos.run``: answer hundreds of sessions and runs while faults rain down.

Starts its own stack (see :mod:`tests.chaos.stack`), seeds sessions at the start and while
it runs, kills pool processes and whole workers and makes the API fail at random (all from
one seed), then stops injecting, waits for every session to be answered, verifies, and
prints one line::

    chaos: 400 sessions, 1,730 calls, 57 faults injected, 0 lost, 0 duplicated, 0 re-run side effects

followed by an informational line. Exits 0 only when nothing was lost, duplicated or
re-run. Progress goes to stderr; the service logs are kept (and named) when a run fails.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dispatcher.devstack import until_stopped, wait_for
from dispatcher.sources.assistants_watch import Watches
from tests.chaos.keys import RUNS_PREFIX
from tests.chaos.plan import (
    Fault,
    PlannedSession,
    Wave,
    plan_faults,
    plan_sessions,
    plan_waves,
)
from tests.chaos.stack import ChaosStack, StackConfig
from tests.chaos.verify import Faults, Tally, run_batches, run_key, verify
from tests.owned import DatabasesClobbered

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run.

    Attributes:
        sessions: Sessions to seed (a quarter at the start, the rest while faults run).
        runs_share: Share of them seeded as Assistants runs (the ``assistants`` source).
        seed: Seeds the sessions, the fault schedule and the emulator's fault dice.
        duration: Seconds of fault injection; default 0.15 s per session, 20 s at least.
        duration_cap: Injection never runs longer than this, whatever ``duration`` says.
        settle_timeout: Seconds to wait, after the faults stop, for every answer.
        quiet_period: Seconds to keep running after the last answer, so that a late
            duplicate (a stale chord's submit, a re-dispatch) has its chance to show up.
        mean_fault_interval: Mean seconds between two faults.
        min_worker_kills: Whole workers killed at least (the rest is up to the dice).
        worker_kill_every: Seconds between whole-worker kills (jittered by a quarter), on
            top of the dice; ``None``: only the dice's.
        answer_within: Seconds after the last kill (or after its seeding, if later) by
            which every session must be answered; a later answer counts as late.
        broker_db: Redis database of the broker; flushed at start and at the end.
        ledger_db: Redis database of the ledger, results and counters; flushed likewise.
        keep_logs: Keep the service logs even when the run passes.
    """

    sessions: int = 400
    runs_share: float = 0.3
    seed: int = 1
    duration: float | None = None
    duration_cap: float = 300.0
    settle_timeout: float = 180.0
    quiet_period: float = 3.0
    mean_fault_interval: float = 1.5
    min_worker_kills: int = 1
    worker_kill_every: float | None = 4.0
    answer_within: float = 60.0
    broker_db: int = 10
    ledger_db: int = 11
    keep_logs: bool = False

    @property
    def window(self) -> float:
        """Seconds of fault injection."""
        wanted = self.duration if self.duration is not None else max(20.0, 0.15 * self.sessions)
        return min(wanted, self.duration_cap)


@dataclass
class ChaosResult:
    """The figures, how long the run took, and where its logs are if they were kept."""

    tally: Tally
    elapsed: float
    logs: Path | None = None
    seeded: dict[str, PlannedSession] = field(default_factory=dict)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Run:
    """One run in progress: the stack, what was seeded, and the faults injected so far."""

    def __init__(self, config: ChaosConfig, stack: ChaosStack, progress: Progress) -> None:
        self.config = config
        self.stack = stack
        self.progress = progress
        self.rng = random.Random(config.seed * 7919 + 1)
        self.plan = plan_sessions(random.Random(config.seed), config.sessions, config.runs_share)
        self.seeded: dict[str, PlannedSession] = {}
        self.faults = Faults()
        self.last_kill = 0.0
        self.seeded_at: dict[str, float] = {}

    def timeline(self) -> list[Wave | Fault]:
        """Seeding waves and faults, in time order."""
        window = self.config.window
        faults = plan_faults(
            random.Random(config_seed_for_faults(self.config)),
            window,
            self.config.mean_fault_interval,
            self.config.min_worker_kills,
            self.config.worker_kill_every,
        )
        waves = plan_waves(len(self.plan), window * 0.7)
        return sorted([*waves, *faults], key=lambda e: e.at)

    def seed_wave(self, wave: Wave) -> None:
        """Create the wave's sessions and runs in the emulator; watch the runs."""
        runs = []
        for session in self.plan[wave.start : wave.stop]:
            if session.run:
                created = self.stack.state.create_run(session.phases(), metadata={"chaos": "1"})
                runs.append((created["thread_id"], created["id"]))
                key = run_key(created["thread_id"], created["id"])
            else:
                created = self.stack.state.create_session(session.actions, metadata={"chaos": "1"})
                key = created["id"]
            self.seeded[key] = session
            self.seeded_at[key] = time.time()
        if runs:
            client = self.stack.redis()
            try:
                Watches(client).add(runs)
            finally:
                client.close()

    def inject(self, fault: Fault) -> None:
        """Apply one scheduled fault and count it."""
        if fault.kind == "kill_child":
            if self.stack.kill_child(self.rng) is not None:
                self.faults.child_kills += 1
        elif fault.kind == "kill_worker":
            self.last_kill = time.time()
            replacement = self.stack.kill_worker(self.rng)
            self.faults.worker_kills += 1
            self.progress(f"chaos| killed a worker; {replacement.log_path.stem} took over")
        elif fault.kind == "api_on":
            self.stack.state.set_faults(**fault.knobs)
        else:
            self.stack.state.set_faults()

    def play(self) -> None:
        """Play the timeline; past the duration cap, only the seeding goes on."""
        start = time.monotonic()
        for event in self.timeline():
            delay = start + event.at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if isinstance(event, Wave):
                self.seed_wave(event)
            elif time.monotonic() - start <= self.config.duration_cap:
                self.inject(event)
        self.stack.state.set_faults()

    def settle(self) -> None:
        """Wait (bounded) until every session with function calls has an accepted batch."""
        waiting = {sid for sid, s in self.seeded.items() if s.calls}
        last = [0.0]

        def answered() -> bool:
            done = {b.session_id for b in self.batches()} & self._finished()
            if time.monotonic() - last[0] > 5:
                last[0] = time.monotonic()
                self.progress(f"chaos| answered {len(waiting & done)}/{len(waiting)} sessions")
            return waiting <= done

        try:
            wait_for(answered, self.config.settle_timeout, "every session's answer", 0.2)
        except TimeoutError as exc:
            self.progress(f"chaos| {exc}; verifying what there is")
        time.sleep(self.config.quiet_period)

    def tally(self) -> Tally:
        """Stop the services, then verify against the batches and the counters."""
        self.stack.stop_services()
        self.stack.check_databases()
        self.faults.count_requests(self.stack.state.requests())
        keys = [c.counter for s in self.seeded.values() for c in s.calls if c.counter]
        batches = self.batches()
        tally = verify(self.seeded, batches, self._counters(keys), self.faults)
        self._count_late(tally, batches)
        return tally

    def batches(self) -> list[Any]:
        """Every accepted batch: the sessions', and each run's submits as batches alike."""
        return [*self.stack.state.batches(), *run_batches(self.stack.state, self.seeded)]

    def _finished(self) -> set[str]:
        """Sessions (answered is enough) and runs whose every phase was answered."""
        done = set(self.seeded)
        for run in self.stack.state.runs():
            key = run_key(run["thread_id"], run["run_id"])
            if key in done and run["status"] != "completed":
                done.discard(key)
        return done

    def _count_late(self, tally: Tally, batches: list[Any]) -> None:
        """Sessions answered more than ``answer_within`` after the last kill (or seeding)."""
        first: dict[str, float] = {}
        for batch in batches:
            first[batch.session_id] = min(
                first.get(batch.session_id, batch.received_at), batch.received_at
            )
        for sid, session in self.seeded.items():
            if not session.calls or sid not in first:
                continue
            due = max(self.last_kill, self.seeded_at[sid]) + self.config.answer_within
            if first[sid] > due:
                tally.late += 1
                tally.problems.append(
                    f"session {sid}: answered {first[sid] - due + self.config.answer_within:.1f} s "
                    "after the last kill or its seeding"
                )

    def _counters(self, keys: list[str]) -> dict[str, int]:
        client = self.stack.redis()
        try:
            values: list[Any] = []
            for i in range(0, len(keys), 500):
                values += client.mget([RUNS_PREFIX + k for k in keys[i : i + 500]])
        finally:
            client.close()
        return {k: int(v) for k, v in zip(keys, values, strict=True) if v is not None}


def config_seed_for_faults(config: ChaosConfig) -> int:
    """The fault schedule's own seed, so changing the session count keeps the faults."""
    return config.seed * 104_729 + 17


def run_chaos(config: ChaosConfig, progress: Progress = _stderr) -> ChaosResult:
    """Run the whole thing; the stack is gone when this returns."""
    workdir = Path(tempfile.mkdtemp(prefix="toolfan-chaos-"))
    started = time.monotonic()
    ok = False
    try:
        stack_config = StackConfig(workdir, config.broker_db, config.ledger_db)
        with ChaosStack(stack_config) as stack:
            progress(f"chaos| stack up in {time.monotonic() - started:.1f} s; logs in {workdir}")
            run = Run(config, stack, progress)
            run.play()
            progress(f"chaos| {len(run.seeded)} sessions seeded, faults stopped; settling")
            run.settle()
            tally = run.tally()
        ok = tally.ok
        return ChaosResult(tally, time.monotonic() - started, None if ok else workdir, run.seeded)
    finally:
        if ok and not config.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"chaos| service logs kept in {workdir}")


def report(result: ChaosResult, seed: int, out: Callable[[str], None] = print) -> None:
    """Print the line, the informational line, and what went wrong if anything did."""
    out(result.tally.line())
    out(result.tally.details(seed, result.elapsed))
    for problem in result.tally.problems[:30]:
        _stderr(f"chaos| problem: {problem}")


def parse_args(argv: Iterable[str] | None = None) -> ChaosConfig:
    """The command line, as a :class:`ChaosConfig`."""
    p = argparse.ArgumentParser(
        prog="python -m tests.chaos.run", description=__doc__.split("\n")[0]
    )
    p.add_argument("--sessions", type=int, default=400, help="sessions to seed (400)")
    p.add_argument(
        "--runs-share", type=float, default=0.3, help="share seeded as Assistants runs (0.3)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the whole run (1)")
    p.add_argument("--duration", type=float, help="seconds of fault injection (0.15 s/session)")
    p.add_argument("--duration-cap", type=float, default=300.0, help="at most this (300)")
    p.add_argument("--settle-timeout", type=float, default=180.0, help="wait for answers (180)")
    p.add_argument(
        "--dbs",
        default="10,11",
        help="broker and ledger Redis databases, flushed at start and end (10,11)",
    )
    p.add_argument("--keep-logs", action="store_true", help="keep the service logs")
    a = p.parse_args(list(argv) if argv is not None else None)
    broker_db, ledger_db = (int(n) for n in a.dbs.split(","))
    return ChaosConfig(
        sessions=a.sessions,
        runs_share=a.runs_share,
        seed=a.seed,
        duration=a.duration,
        duration_cap=a.duration_cap,
        settle_timeout=a.settle_timeout,
        broker_db=broker_db,
        ledger_db=ledger_db,
        keep_logs=a.keep_logs,
    )


def main(argv: Iterable[str] | None = None) -> int:
    """Entry point: 0 when exactly-once held under every fault, 1 when not, 2 if void."""
    config = parse_args(argv)
    return until_stopped("chaos", lambda: _campaign(config))


def _campaign(config: ChaosConfig) -> int:
    """The run and its report, stopped (stack and all) by a SIGTERM or SIGHUP."""
    try:
        result = run_chaos(config)
    except DatabasesClobbered as exc:
        _stderr(f"chaos: void run: {exc}")
        return 2
    report(result, config.seed)
    return 0 if result.tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
