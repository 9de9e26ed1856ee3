"""``python -m bench pairs``: chosen no-op rows in turn on one stack, for an A/B of a change.

The full bench takes ten minutes and measures everything; a change to one path wants only
that path's row beside its baselines, several times, on one stack, with a setting changed
or not. So this runs the no-op workload's ``--rows`` (raw Celery, the floor, toolfan, the
runs row, the runs floor, raw Celery's chords that also write the ledger) one after
another, ``--pairs`` times, the order rotating each round so that a machine that slows
down during the run weighs on every row alike. Each row's throughput is divided by the
first row's in the same round; the medians of those ratios are the figures.
``--env NAME=VALUE`` sets a variable for the workers and pollers the run starts: one run
per setting gives an A/B of a setting, and the same command on two checkouts an A/B of a
change. ``--workload io`` runs raw Celery, the floor and toolfan on the I/O workload
instead (its 50 ms tool, on its own workers' pool). Writes ``pairs.json`` and ``pairs.txt``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.assistants import run_assistants, runs_poller
from bench.config import BenchConfig, Workload
from bench.emu import Emulator
from bench.engine import run_raw, run_toolfan
from bench.figures import (
    ASSISTANTS,
    FLOOR,
    RAW,
    RAW_LEDGER,
    RUNS_FLOOR,
    SPLIT,
    TOOLFAN,
    Measurement,
)
from bench.floor import run_floor
from bench.floor_runs import run_runs_floor
from bench.options import add_stack_options, stack_config
from bench.run import WARM_UP, say, use_stack_env
from bench.stack import BenchStack
from dispatcher.devstack import Service

#: The rows by their ``--rows`` name: the figure's system name.
ROWS = {
    "raw": RAW,
    "raw-ledger": RAW_LEDGER,
    "floor": FLOOR,
    "toolfan": TOOLFAN,
    "runs": ASSISTANTS,
    "runs-floor": RUNS_FLOOR,
}
#: The rows that run on the I/O workload too (the others are the no-op workload's only).
IO_ROWS = ("raw", "floor", "toolfan")
#: What a variable set with ``--env`` may be named (toolfan's settings and the API's).
ENV_NAME = re.compile(r"(TOOLFAN|OPENAI)_[A-Z0-9_]+")

Row = Callable[[BenchStack, Emulator, Workload, list[Service], int | None], Measurement]


@dataclass(frozen=True)
class PairsConfig:
    """What the run measures, and on what."""

    rows: tuple[str, ...] = ("raw", "floor", "toolfan")
    pairs: int = 4
    env: dict[str, str] = field(default_factory=dict)
    bench: BenchConfig = field(default_factory=lambda: BenchConfig(out=Path("bench-pairs")))
    #: ``noop`` or ``io``: which of the bench's workloads the rows run.
    workload: str = "noop"


def _raw(
    stack: BenchStack, _: Emulator, w: Workload, workers: list[Service], n: int | None
) -> Measurement:
    return run_raw(stack, w, workers, n)


def _raw_ledger(
    stack: BenchStack, _: Emulator, w: Workload, workers: list[Service], n: int | None
) -> Measurement:
    return run_raw(stack, w, workers, n, ledger=True)


def _toolfan(
    stack: BenchStack, emu: Emulator, w: Workload, workers: list[Service], n: int | None
) -> Measurement:
    """The toolfan row on a poller of its own, warmed by a few sessions as the bench does."""
    with stack.poller() as poller:
        if n is None:
            run_toolfan(stack, emu, w, (workers, poller), WARM_UP)
        return run_toolfan(stack, emu, w, (workers, poller), n)


def _runs(
    stack: BenchStack, emu: Emulator, w: Workload, workers: list[Service], n: int | None
) -> Measurement:
    """The runs row on a runs poller of its own, warmed by a few runs as the bench does."""
    with runs_poller(stack) as poller:
        if n is None:
            run_assistants(stack, emu, w, (workers, poller), WARM_UP)
        return run_assistants(stack, emu, w, (workers, poller), n)


MEASURES: dict[str, Row] = {
    RAW: _raw,
    RAW_LEDGER: _raw_ledger,
    FLOOR: run_floor,
    TOOLFAN: _toolfan,
    ASSISTANTS: _runs,
    RUNS_FLOOR: run_runs_floor,
}


def rotated(rows: Sequence[str], round_: int) -> list[str]:
    """The rows in the order round ``round_`` runs them (each round starts one later)."""
    shift = round_ % len(rows)
    return [*rows[shift:], *rows[:shift]]


def measure(config: PairsConfig) -> list[dict[str, Measurement]]:
    """Each round's measurement of every row, on one stack (a warm-up of each first)."""
    workdir = config.bench.out / "logs"
    workdir.mkdir(parents=True, exist_ok=True)
    systems = [ROWS[name] for name in config.rows]
    rounds: list[dict[str, Measurement]] = []
    with BenchStack(config.bench, workdir) as stack:
        use_stack_env(stack.env)
        stack.env.update(config.env)  # before the workers and pollers start
        emu = Emulator(stack.origin)
        chosen = {w.name: w for w in stack.config.workloads()}[config.workload]
        workload = replace(chosen, sessions=config.bench.sessions)  # --sessions, either one
        try:
            with stack.workers(workload) as workers:
                for system in systems:
                    MEASURES[system](stack, emu, workload, workers, WARM_UP)
                for round_ in range(config.pairs):
                    measured = {}
                    for system in rotated(systems, round_):
                        m = MEASURES[system](stack, emu, workload, workers, None)
                        say(f"  round {round_ + 1}: {m.system}: {m.calls_per_s:,.0f} calls/s")
                        measured[system] = m
                    rounds.append(measured)
        finally:
            emu.close()
    return rounds


def summary(rounds: list[dict[str, Measurement]], config: PairsConfig) -> dict[str, Any]:
    """Per row: calls/s and ratio to the first row in each round, their medians, the costs."""
    base = ROWS[config.rows[0]]
    rows: dict[str, Any] = {}
    for name in config.rows:
        system = ROWS[name]
        ms = [r[system] for r in rounds]
        ratios = [r[system].calls_per_s / r[base].calls_per_s for r in rounds]
        rows[name] = {
            "calls_per_s": [m.calls_per_s for m in ms],
            "ratio_to_first": ratios,
            "median_ratio": statistics.median(ratios),
            "redis_commands_per_call": _median([m.redis_commands_per_call for m in ms]),
            "cpu_ms_per_call": _median(
                [
                    None if m.cpu_seconds_per_call is None else 1000 * m.cpu_seconds_per_call
                    for m in ms
                ]
            ),
            SPLIT: _median_split(ms),
            "run_reads_per_run": _reads_per_run(ms),
        }
    return {
        "rows": list(config.rows),
        "workload": config.workload,
        "pairs": config.pairs,
        "env": config.env,
        "sessions": config.bench.sessions,
        "calls": config.bench.calls,
        "results": rows,
    }


def _median(values: list[float | None]) -> float | None:
    """The median of the values measured (None when none was)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _median_split(ms: list[Measurement]) -> dict[str, float]:
    """The median CPU ms per call of each process the rows name."""
    splits = [m.extra.get(SPLIT, {}) for m in ms]
    names = sorted({name for split in splits for name in split})
    return {n: statistics.median(s[n] for s in splits if n in s) for n in names}


def _reads_per_run(ms: list[Measurement]) -> float | None:
    """Median reads of a run per run (the run-shaped rows only)."""
    reads = [
        m.extra["retrieve_requests"] / m.sessions for m in ms if "retrieve_requests" in m.extra
    ]
    return statistics.median(reads) if reads else None


def lines(doc: dict[str, Any]) -> list[str]:
    """The table: each row's median ratio to the first, every round's, and its costs."""
    first = doc["rows"][0]
    setting = ", ".join(f"{k}={v}" for k, v in doc["env"].items()) or "default settings"
    kind = "I/O" if doc.get("workload") == "io" else "no-op"
    out = [
        f"{kind} rows in turn, {doc['pairs']} rounds of {doc['sessions']} x {doc['calls']} "
        f"calls, {setting}; ratio = calls/s over {first}'s in the same round",
        f"{'row':>11} {'calls/s':>9} {'ratio':>6} {'redis/call':>10} {'cpu ms':>7}  per round",
    ]
    for name in doc["rows"]:
        r = doc["results"][name]
        each = ", ".join(f"{x:.2f}" for x in r["ratio_to_first"])
        out.append(
            f"{name:>11} {statistics.median(r['calls_per_s']):>9,.0f} {r['median_ratio']:>6.2f} "
            f"{_ms(r['redis_commands_per_call'], 1):>10} {_ms(r['cpu_ms_per_call']):>7}  [{each}]"
        )
    for name in doc["rows"]:
        r = doc["results"][name]
        split = ", ".join(f"{k} {v:.2f}" for k, v in r[SPLIT].items())
        reads = r["run_reads_per_run"]
        more = f"; {reads:.2f} reads per run" if reads is not None else ""
        out.append(f"{name}: CPU ms per call by process: {split}{more}")
    return out


def _ms(value: float | None, places: int = 2) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def build_parser() -> argparse.ArgumentParser:
    """The pairs run's options."""
    defaults = PairsConfig()
    p = argparse.ArgumentParser(
        prog="python -m bench pairs",
        description="Chosen rows of the no-op (or I/O) workload in turn on one stack, "
        "--pairs rounds, each row's throughput over the first row's in the same round. "
        "Writes pairs.json and pairs.txt to --out.",
    )
    p.add_argument(
        "--workload",
        choices=("noop", "io"),
        default=defaults.workload,
        help=f"the no-op workload, or the I/O one (its rows: {', '.join(IO_ROWS)}) (noop)",
    )
    p.add_argument(
        "--rows",
        default=",".join(defaults.rows),
        help=f"comma-separated, the first is the baseline: {', '.join(ROWS)} "
        f"({','.join(defaults.rows)})",
    )
    p.add_argument("--pairs", type=int, default=defaults.pairs, help="rounds (4)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a TOOLFAN_ or OPENAI_ variable for the workers and pollers the run starts "
        "(repeatable)",
    )
    add_stack_options(p, defaults.bench, "sessions, or runs")
    return p


def parse_config(argv: Sequence[str]) -> PairsConfig:
    """The configuration from the command line.

    Raises:
        SystemExit: an option is out of range (argparse's exit, code 2).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    rows = tuple(r.strip() for r in args.rows.split(",") if r.strip())
    unknown = [r for r in rows if r not in ROWS]
    if not rows or unknown:
        parser.error(f"--rows takes some of {', '.join(ROWS)}, not {args.rows!r}")
    if len(set(rows)) != len(rows):
        parser.error(f"--rows names a row twice: {args.rows!r}")
    other = [r for r in rows if r not in IO_ROWS]
    if args.workload == "io" and other:
        parser.error(f"--workload io runs {', '.join(IO_ROWS)}; not {', '.join(other)}")
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            parser.error(f"--env takes TOOLFAN_NAME=VALUE or OPENAI_NAME=VALUE, not {item!r}")
        env[name] = value
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    bench = stack_config(parser, args)
    return PairsConfig(rows, args.pairs, env, bench, args.workload)


def main(argv: Sequence[str]) -> int:
    """Run the rows in turn and write ``pairs.json`` and ``pairs.txt``."""
    config = parse_config(argv)
    config.bench.out.mkdir(parents=True, exist_ok=True)
    say(f"pairs: {', '.join(config.rows)}, {config.pairs} rounds")
    doc = summary(measure(config), config)
    text = lines(doc)
    (config.bench.out / "pairs.json").write_text(json.dumps(doc, indent=2) + "\n")
    (config.bench.out / "pairs.txt").write_text("\n".join(text) + "\n")
    print("\n".join(text), flush=True)
    return 0
