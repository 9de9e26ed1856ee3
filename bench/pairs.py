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

Two runs, one per setting or checkout, are minutes apart, and this machine's speed moves by
more than most changes are worth from one round to the next. ``--switch PATH`` puts both
halves of an A/B in one run instead: the run creates the file ``PATH`` for rounds 3 and 4,
7 and 8 and so on, and removes it for the others (each state gets pairs of rounds, so that
with two rows each state sees each row in each place of the order). A change made to read
it (``os.path.exists(PATH)``, a line in a working tree, never committed) is then on in
half the rounds, and the table gives each row's median ratio with the file and without,
and their quotient.
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
    #: The file that is there in the rounds :func:`switched` names, and only then.
    switch: Path | None = None


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


#: Rounds in a row with the switch in one state: two, so that both orders of two rows
#: (which alternate each round) fall in each state.
SWITCH_ROUNDS = 2


def switched(round_: int) -> bool:
    """Whether the switch file is there in round ``round_`` (from 0): off, off, on, on, ..."""
    return (round_ // SWITCH_ROUNDS) % 2 == 1


def _set_switch(switch: Path | None, on: bool) -> None:
    if switch is None:
        return
    if on:
        switch.touch()
    else:
        switch.unlink(missing_ok=True)


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
                    _set_switch(config.switch, switched(round_))
                    state = _switch_word(config.switch, round_)
                    measured = {}
                    for system in rotated(systems, round_):
                        m = MEASURES[system](stack, emu, workload, workers, None)
                        rate = f"{m.calls_per_s:,.0f} calls/s"
                        say(f"  round {round_ + 1}: {m.system}: {rate}{state}")
                        measured[system] = m
                    rounds.append(measured)
        finally:
            _set_switch(config.switch, False)
            emu.close()
    return rounds


def _switch_word(switch: Path | None, round_: int) -> str:
    if switch is None:
        return ""
    return ", switch on" if switched(round_) else ", switch off"


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
        if config.switch is not None:
            rows[name]["switch"] = {**by_switch(ratios), **_reads_by_switch(ms)}
    return {
        "rows": list(config.rows),
        "workload": config.workload,
        "pairs": config.pairs,
        "env": config.env,
        "switch": None if config.switch is None else str(config.switch),
        "sessions": config.bench.sessions,
        "calls": config.bench.calls,
        "results": rows,
    }


def by_switch(ratios: Sequence[float]) -> dict[str, Any]:
    """The rounds' ratios without the switch file and with it, their medians and quotient."""
    off = [r for i, r in enumerate(ratios) if not switched(i)]
    on = [r for i, r in enumerate(ratios) if switched(i)]
    median_off, median_on = statistics.median(off), statistics.median(on)
    return {
        "off": off,
        "on": on,
        "median_off": median_off,
        "median_on": median_on,
        "on_over_off": median_on / median_off if median_off else None,
    }


def _reads_by_switch(ms: list[Measurement]) -> dict[str, Any]:
    """A run-shaped row's median reads per run without the switch file and with it."""
    if not all("retrieve_requests" in m.extra for m in ms):
        return {}
    reads = [m.extra["retrieve_requests"] / m.sessions for m in ms]
    off = [r for i, r in enumerate(reads) if not switched(i)]
    on = [r for i, r in enumerate(reads) if switched(i)]
    return {"reads_per_run_off": statistics.median(off), "reads_per_run_on": statistics.median(on)}


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
    if doc.get("switch"):
        out.append(f"with and without {doc['switch']} (rounds 3-4, 7-8, ...: on):")
        out.extend(_switch_line(name, doc["results"][name]["switch"]) for name in doc["rows"][1:])
    return out


def _switch_line(name: str, split: dict[str, Any]) -> str:
    off = ", ".join(f"{x:.2f}" for x in split["off"])
    on = ", ".join(f"{x:.2f}" for x in split["on"])
    quotient = _ms(split["on_over_off"], 3)
    reads = ""
    if "reads_per_run_off" in split:
        reads = (
            f"; reads per run {split['reads_per_run_off']:.2f} and {split['reads_per_run_on']:.2f}"
        )
    return (
        f"{name:>11} off {split['median_off']:.3f} [{off}], on {split['median_on']:.3f} [{on}]: "
        f"on/off {quotient}{reads}"
    )


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
    p.add_argument(
        "--switch",
        type=Path,
        metavar="PATH",
        help="a file (that must not exist yet) the run creates for rounds 3-4, 7-8, ... and "
        "removes for the others; each row's ratio is also given with it and without it "
        "(at least 4 --pairs)",
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
    switch = _switch(parser, args.switch, args.pairs)
    bench = stack_config(parser, args)
    return PairsConfig(rows, args.pairs, env, bench, args.workload, switch)


def _switch(parser: argparse.ArgumentParser, switch: Path | None, pairs: int) -> Path | None:
    """``--switch``'s file, refused when there is something there already or too few rounds.

    The run removes the file as it ends, so a path that exists (someone's file, or one left
    by a run that was killed) is not taken: the run would delete it or start switched on.
    """
    if switch is None:
        return None
    if pairs < 2 * SWITCH_ROUNDS:
        parser.error(f"--switch needs at least {2 * SWITCH_ROUNDS} --pairs (both states)")
    if switch.exists() or switch.is_symlink():
        parser.error(f"--switch {str(switch)!r} exists; the run creates and removes it itself")
    if not switch.parent.is_dir():
        parser.error(f"--switch {str(switch)!r}: no such directory {str(switch.parent)!r}")
    return switch.absolute()


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
