"""The soak's runs: the ``assistants`` source's share of the load, and its per-phase tally.

A user of the run-shaped protocol starts runs and names them to toolfan (``watch_runs``);
so the soak seeds runs in the emulator at Poisson times, one or two phases of the same mix
of calls as the sessions, and watches each batch of them as it is seeded. Each phase must
have exactly one accepted ``submit_tool_outputs``, carrying every call of that phase once,
the tool's output for a call that succeeds and toolfan's ``{"error": ...}`` text for one
that fails. Like the sessions, each run is checked from the outside (the emulator's
accepted submits against the plan), never against the ledger under test.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.assistants import is_error, seed_runs
from bench.emu import JSON, Emulator
from bench.soak_load import (
    FAIL_TOOL,
    Arrivals,
    Problems,
    draw_calls,
    draw_count,
    mean_calls,
)
from bench.tools import OUTPUT

#: Phases per run and their weights: most runs ask once, some ask again after a model turn.
PHASES_WEIGHTS: dict[int, float] = {1: 0.7, 2: 0.3}


@dataclass(frozen=True)
class RunPlan:
    """One run to seed: its body, and per phase, per call id whether it must succeed."""

    body: JSON
    phases: list[dict[str, bool]]

    @property
    def calls(self) -> int:
        """Function calls over all its phases."""
        return sum(len(p) for p in self.phases)


@dataclass(frozen=True)
class SeededRun:
    """A planned run as seeded: its ids and the server time it became ``requires_action``."""

    thread_id: str
    run_id: str
    at: float
    plan: RunPlan

    @property
    def key(self) -> tuple[str, str]:
        """Its (thread id, run id), as submits name it."""
        return self.thread_id, self.run_id


def plan_run(rng: random.Random) -> RunPlan:
    """One run: one or two phases, each drawn from the sessions' mix of calls."""
    count = rng.choices(list(PHASES_WEIGHTS), weights=list(PHASES_WEIGHTS.values()))[0]
    phases: list[list[JSON]] = []
    expect: list[dict[str, bool]] = []
    for p in range(count):
        calls = draw_calls(rng, draw_count(rng))
        ids = [f"call_{p}_{i}" for i in range(len(calls))]
        phases.append(
            [{"name": n, "arguments": a, "id": i} for i, (n, a) in zip(ids, calls, strict=True)]
        )
        expect.append({i: n != FAIL_TOOL for i, (n, _) in zip(ids, calls, strict=True)})
    return RunPlan({"phases": phases}, expect)


def mean_run_calls() -> float:
    """Calls per run, on average."""
    total = sum(PHASES_WEIGHTS.values())
    return mean_calls() * sum(k * w for k, w in PHASES_WEIGHTS.items()) / total


def as_planned(output: object, success: bool) -> bool:
    """Whether an output string is the planned outcome: the tool's output, or an error text."""
    if not isinstance(output, str):
        return False
    return output == OUTPUT if success else is_error(output)


class RunSeeder(Arrivals[RunPlan, SeededRun]):
    """Seeds runs at Poisson arrival times and watches them, as their user would.

    Args:
        origin: The emulator's ``http://host:port``.
        rate: Calls per second to offer (runs arrive at ``rate`` / mean calls per run).
        seed: Seed of the arrivals and of the mix.
    """

    def __init__(self, origin: str, rate: float, seed: int) -> None:
        super().__init__("soak-runs", rate / mean_run_calls(), seed)
        self.emu = Emulator(origin)

    def plan(self, n: int) -> RunPlan:
        """One run of the mix."""
        return plan_run(self.rng)

    def send(self, plans: list[RunPlan]) -> None:
        """Seed the runs in one bulk request, then name them to toolfan."""
        from toolfan import watch_runs

        seeded = seed_runs(self.emu, [p.body for p in plans])
        watch_runs(seeded.runs)
        self.keep(
            SeededRun(t, r, seeded.at, p) for (t, r), p in zip(seeded.runs, plans, strict=True)
        )

    def release(self) -> None:
        """Close the emulator client."""
        self.emu.close()


@dataclass
class RunTally(Problems):
    """Runs, phases and outputs answered, from the emulator's accepted submits.

    ``duplicated`` counts phases with more than one accepted submit and outputs given twice
    in one; ``wrong`` outputs with the other outcome than planned (or for calls never
    asked), and submits for runs or phases never seeded; ``missing`` phases never submitted
    and calls a submit left out. ``lost`` counts accepted submits whose answer the API
    dropped (toolfan had to read the run to learn the phase was taken).
    """

    runs: int = 0
    phases: int = 0
    lost: int = 0

    def add(self, seeded: Sequence[SeededRun], submits: Iterable[JSON]) -> None:
        """Check one epoch's runs against the submits the emulator accepted for them."""
        by_run: dict[tuple[str, str], list[JSON]] = {}
        for submit in submits:
            by_run.setdefault((submit["thread_id"], submit["run_id"]), []).append(submit)
            self.lost += bool(submit.get("lost"))
        for run in seeded:
            self.runs += 1
            self.phases += len(run.plan.phases)
            self.calls += run.plan.calls
            self._check_run(run, by_run.pop(run.key, []))
        for key in by_run:
            self._problem(f"a submit for a run never seeded: {key!r}")
            self.wrong += 1

    def _check_run(self, run: SeededRun, submits: list[JSON]) -> None:
        by_phase: dict[int, list[JSON]] = {}
        for submit in submits:
            by_phase.setdefault(int(submit["phase"]), []).append(submit)
        for index, expect in enumerate(run.plan.phases):
            answers = by_phase.pop(index, [])
            if self._once(len(answers), f"phase {index} of run {run.key!r}"):
                self._check_outputs(run, expect, [o for a in answers for o in a["tool_outputs"]])
        for index in by_phase:
            self.wrong += 1
            self._problem(f"a submit for phase {index} of run {run.key!r}, never asked")

    def _check_outputs(self, run: SeededRun, expect: dict[str, bool], outputs: list[JSON]) -> None:
        seen = Counter(o.get("tool_call_id") for o in outputs)
        for call_id in expect:
            if seen[call_id] == 0:
                self.missing += 1
                self._problem(f"call {call_id!r} of run {run.key!r} left out of its submit")
        for output in outputs:
            named = output.get("tool_call_id")
            if named not in expect or not as_planned(output.get("output"), expect[named]):
                self.wrong += 1
                self._problem(f"call {named!r} of run {run.key!r}: unexpected {output!r}")
            elif seen[named] > 1:
                self.duplicated += 1
            self.answered += 1
            self.failures += is_error(str(output.get("output")))

    def to_json(self) -> dict[str, Any]:
        """The tally as data."""
        return {
            "runs": self.runs,
            "phases": self.phases,
            "calls": self.calls,
            "answered_calls": self.answered,
            "failures_answered": self.failures,
            "lost_answers": self.lost,
            "duplicated": self.duplicated,
            "wrong": self.wrong,
            "missing": self.missing,
            "problems": self.problems,
        }


def phase_times(
    seeded: Iterable[SeededRun], submits: Iterable[JSON], turn: float
) -> list[tuple[float, float]]:
    """(waiting since, seconds to its submit) of each phase's first accepted submit.

    A run's first phase waits from its seeding; a later one from the end of the model turn
    that its previous phase's submit started (``turn`` seconds, the emulator's).
    """
    first: dict[tuple[str, str, int], float] = {}
    for s in submits:
        first.setdefault((s["thread_id"], s["run_id"], int(s["phase"])), float(s["received_at"]))
    out = []
    for run in seeded:
        since = run.at
        for index in range(len(run.plan.phases)):
            at = first.get((*run.key, index))
            if at is None:
                break
            out.append((since, at - since))
            since = at + turn
    return out
