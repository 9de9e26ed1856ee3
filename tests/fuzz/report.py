"""Printing a run: the summary line, the informational line, and the problems grouped.

stdout gets exactly two lines (the summary the run is judged by, then seed, time and
faults); stderr gets one line per group of alike problems with one concrete example,
and for lost and refused calls the kinds every affected session held (the likely
triggers). Every problem goes to ``problems.txt`` next to the kept logs.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.fuzz.plan import PlannedSession
from tests.fuzz.suspects import suspects
from tests.fuzz.verify import COUNTERS, Problem, Tally

INFORMATIONAL = ("unexpected error", "oversized", "log error", "note")
GROUPS_SHOWN = 12
Out = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def details(
    tally: Tally,
    seed: int,
    elapsed: float,
    faults: str,
    skipped: Sequence[str],
    logs: Path | None = None,
) -> str:
    """The informational line: seed, time, faults injected, answer times, side findings."""
    f, c, lat = tally.faults, tally.counts, list(tally.latencies.values())
    times = (
        f"answer time p50 {statistics.median(lat):.2f} s, p95 {_percentile(lat, 0.95):.2f} s, "
        f"max {max(lat):.2f} s"
        if lat
        else "no session answered"
    )
    skip = "; skipped: " + ", ".join(skipped) if skipped else ""
    return (
        f"fuzz: seed {seed}, {elapsed:.1f} s; faults injected: {f['error']} API 500s, "
        f"{f['throttle']} 429s, {f['lost']} lost 202s in {faults}; {times}; "
        f"{tally.answerable:,} answerable calls; informational: {c['unexpected error']} "
        f"unexpected errors, {c['oversized']} oversized, {c['log error']} log records lost, "
        f"{c['note']} notes{skip}" + (f"; logs kept in {logs}" if logs else "")
    )


def _groups(problems: Sequence[Problem], counter: str) -> list[tuple[str, int, Problem]]:
    groups: dict[str, list[Problem]] = {}
    for problem in problems:
        if problem.counter == counter:
            groups.setdefault(problem.kind, []).append(problem)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))
    return [(kind, len(items), items[0]) for kind, items in ranked]


def problems(tally: Tally, plan: Sequence[PlannedSession], out: Out = _stderr) -> None:
    """One line per group of alike problems, with an example; triggers of lost/refused."""
    for counter in (*COUNTERS, *INFORMATIONAL):
        groups = _groups(tally.problems, counter)
        if not groups:
            continue
        out(f"fuzz| {counter}: {tally.counts[counter]:,} in {len(groups)} kind(s)")
        for kind, count, example in groups[:GROUPS_SHOWN]:
            out(f"fuzz|   {counter} x{count} [{kind}] e.g. {example.text}")
        if len(groups) > GROUPS_SHOWN:
            out(f"fuzz|   ... and {len(groups) - GROUPS_SHOWN} more kinds (see problems.txt)")
        triggers = suspects(tally, plan, counter) if counter in COUNTERS else {}
        for unit, labels in triggers.items():
            shown = ", ".join(labels[:10])
            out(f"fuzz|   {counter}: every one of the {unit} holding these had one: {shown}")


def write_problems(tally: Tally, workdir: Path) -> None:
    """``problems.txt``: every problem, one per line, grouped by counter; and
    ``answer_times.tsv``: each answered session's seconds from seeding to its batch."""
    order = {c: i for i, c in enumerate((*COUNTERS, *INFORMATIONAL))}
    ranked = sorted(tally.problems, key=lambda p: (order.get(p.counter, 99), p.kind))
    lines = [f"{p.counter}\t{p.kind}\t{p.text}" for p in ranked]
    (workdir / "problems.txt").write_text("\n".join(lines) + "\n", errors="backslashreplace")
    times = [f"{took:.3f}\t{sid!r}" for sid, took in tally.latencies.items()]
    (workdir / "answer_times.tsv").write_text("\n".join(times) + "\n")
