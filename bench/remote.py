"""``python -m bench remote``: toolfan against an API that answers later, in two layouts.

Each task on toolfan's own queues (``toolfan.submit``, ``toolfan.poll``, ``toolfan.model``)
mostly waits on the API: a batch's delivery is one request. On a prefork worker that serves
every queue, each such wait holds a pool process that could run calls, so the API's answer
time caps the batches a second. This measures the no-op workload on two layouts, with the
API stand-in adding ``--latencies`` seconds before every answer:

* ``one``: one prefork worker on every queue (``toolfan worker`` with
  ``TOOLFAN_CONTROL_THREADS=0``, what it was before it started a control worker);
* ``split``: ``toolfan worker`` with its defaults: its prefork pool on the function queue,
  and the control worker it starts beside it on the control queues, of ``--threads``
  threads (``TOOLFAN_CONTROL_THREADS``), as the shipped ops files run them too.

Each measurement is a pair on one stack: raw Celery's chords of the same calls (no API,
so no wait; their callbacks run on ``toolfan.submit`` like toolfan's) and toolfan's row,
seeded at once and timed from the first request the API sees to the last accepted batch.
Writes ``remote.json`` and ``remote.txt`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.config import BenchConfig
from bench.emu import Emulator
from bench.engine import run_raw, run_toolfan
from bench.options import add_stack_options, stack_config
from bench.run import WARM_UP, say, use_stack_env
from bench.stack import BenchStack
from dispatcher.devstack import Service

#: The layouts, in the order each round runs them (alternating between rounds).
LAYOUTS = ("one", "split")


@dataclass(frozen=True)
class RemoteConfig:
    """What the remote run measures, and on what."""

    latencies: tuple[float, ...] = (0.0, 0.05, 0.2)
    pairs: int = 2
    threads: int = 64  # TOOLFAN_CONTROL_THREADS's default, spelled: a test holds the two equal
    concurrency: int | None = None
    bench: BenchConfig = field(default_factory=lambda: BenchConfig(out=Path("bench-remote")))


@dataclass(frozen=True)
class Pair:
    """One layout, one added answer time: raw Celery's throughput and toolfan's."""

    layout: str
    latency: float
    raw_calls_per_s: float
    toolfan_calls_per_s: float
    toolfan_seconds: float

    @property
    def ratio(self) -> float:
        """The throughput of toolfan over that of raw Celery."""
        return self.toolfan_calls_per_s / self.raw_calls_per_s


def layout_env(layout: str, config: RemoteConfig) -> dict[str, str]:
    """The environment a layout's ``toolfan worker`` adds: its control worker's threads."""
    threads = 0 if layout == "one" else config.threads
    return {"TOOLFAN_CONTROL_THREADS": str(threads)}


@contextmanager
def fleet(stack: BenchStack, layout: str, config: RemoteConfig) -> Iterator[list[Service]]:
    """The ``toolfan worker`` of one layout, stopped on the way out."""
    options = ["-c", str(config.concurrency)] if config.concurrency else []
    worker = stack.worker(options, layout, layout_env(layout, config))
    try:
        yield [worker]
    finally:
        worker.stop()


def measure_layout(
    stack: BenchStack, emu: Emulator, layout: str, config: RemoteConfig
) -> list[Pair]:
    """One pair per added answer time on one layout's workers.

    Raw Celery runs with no poller beside it, so no poll pass lands in its figures; toolfan
    runs a warm-up batch before each measured run, as in the bench.
    """
    workload = stack.config.workloads()[0]
    pairs = []
    with fleet(stack, layout, config) as workers:
        emu.latency = 0.0
        run_raw(stack, workload, workers, WARM_UP)
        for latency in config.latencies:
            emu.latency = latency
            raw = run_raw(stack, workload, workers)  # no poller beside it, as in the bench
            with stack.poller() as poller:
                run_toolfan(stack, emu, workload, (workers, poller), WARM_UP)
                ours = run_toolfan(stack, emu, workload, (workers, poller))
            pair = Pair(layout, latency, raw.calls_per_s, ours.calls_per_s, ours.seconds)
            say(
                f"  {layout}, {latency * 1000:g} ms: {pair.toolfan_calls_per_s:,.0f} calls/s, "
                f"{pair.ratio:.2f} of raw Celery"
            )
            pairs.append(pair)
    emu.latency = 0.0
    return pairs


def measure(config: RemoteConfig) -> list[Pair]:
    """Every round: both layouts, their order alternating from round to round."""
    workdir = config.bench.out / "logs"
    workdir.mkdir(parents=True, exist_ok=True)
    pairs: list[Pair] = []
    with BenchStack(config.bench, workdir) as stack:
        use_stack_env(stack.env)
        emu = Emulator(stack.origin)
        try:
            for round_ in range(config.pairs):
                for layout in LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]:
                    say(f"round {round_ + 1} of {config.pairs}: {layout}")
                    pairs += measure_layout(stack, emu, layout, config)
        finally:
            emu.close()
    return pairs


def lines(pairs: list[Pair], config: RemoteConfig) -> list[str]:
    """The table: per added answer time, each layout's median calls/s and ratio; each pair's."""
    out = [
        f"no-op calls/s and their ratio to raw Celery's chords, the API answering later "
        f"({config.bench.sessions} sessions x {config.bench.calls} calls; 'split' is toolfan "
        f"worker's default, a control worker of {config.threads} threads beside the pool; "
        f"'one' is TOOLFAN_CONTROL_THREADS=0)",
        f"{'added':>8} {'layout':>6} {'calls/s':>9} {'ratio':>6}  per pair",
    ]
    for latency in config.latencies:
        for layout in LAYOUTS:
            chosen = [p for p in pairs if p.layout == layout and p.latency == latency]
            if not chosen:
                continue
            rate = statistics.median(p.toolfan_calls_per_s for p in chosen)
            ratio = statistics.median(p.ratio for p in chosen)
            each = ", ".join(f"{p.ratio:.2f}" for p in chosen)
            out.append(f"{latency * 1000:>6g}ms {layout:>6} {rate:>9,.0f} {ratio:>6.2f}  [{each}]")
    return out


def document(pairs: list[Pair], config: RemoteConfig) -> dict[str, Any]:
    """The JSON: the configuration and every pair."""
    return {
        "latencies": list(config.latencies),
        "threads": config.threads,
        "concurrency": config.concurrency,
        "sessions": config.bench.sessions,
        "calls": config.bench.calls,
        "pairs": [{**asdict(p), "ratio": p.ratio} for p in pairs],
    }


def build_parser() -> argparse.ArgumentParser:
    """The remote run's options."""
    defaults = RemoteConfig()
    p = argparse.ArgumentParser(
        prog="python -m bench remote",
        description="No-op throughput against raw Celery while the API stand-in answers "
        "later, on one worker of every queue (TOOLFAN_CONTROL_THREADS=0) and on toolfan "
        "worker's default, a prefork pool beside a control worker of threads. Writes "
        "remote.json and remote.txt to --out.",
    )
    shown = ",".join(f"{x:g}" for x in defaults.latencies)
    p.add_argument(
        "--latencies",
        default=shown,
        help=f"seconds the API adds before every answer, comma-separated ({shown})",
    )
    p.add_argument("--pairs", type=int, default=defaults.pairs, help="rounds of each (2)")
    p.add_argument(
        "--threads",
        type=int,
        default=defaults.threads,
        help="the control worker's threads (TOOLFAN_CONTROL_THREADS; its default, 64)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="the function worker's processes (default: toolfan worker's own)",
    )
    add_stack_options(p, defaults.bench, "sessions")
    return p


def parse_config(argv: Sequence[str]) -> RemoteConfig:
    """The configuration from the command line.

    Raises:
        SystemExit: an option is out of range (argparse's exit, code 2).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        latencies = tuple(float(x) for x in args.latencies.split(","))
    except ValueError:
        parser.error(f"--latencies takes seconds, comma-separated, not {args.latencies!r}")
    if any(not 0 <= x <= 10 for x in latencies):
        parser.error("--latencies must be between 0 and 10 seconds")
    for name in ("pairs", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.concurrency is not None and args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    bench = stack_config(parser, args)
    return RemoteConfig(latencies, args.pairs, args.threads, args.concurrency, bench)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurement and write its files."""
    config = parse_config(list(sys.argv[1:] if argv is None else argv))
    config.bench.out.mkdir(parents=True, exist_ok=True)
    pairs = measure(config)
    text = lines(pairs, config)
    (config.bench.out / "remote.txt").write_text("\n".join(text) + "\n")
    doc = document(pairs, config)
    (config.bench.out / "remote.json").write_text(json.dumps(doc, indent=2) + "\n")
    print("\n".join(text), flush=True)
    say(f"wrote {config.bench.out / 'remote.json'} and remote.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
