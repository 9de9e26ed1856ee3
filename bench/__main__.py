"""``python -m bench`` (``make bench``): the benchmark, from a source checkout only.

``python -m bench`` runs the targets' bench; ``python -m bench curves`` draws the cost
curves, ``python -m bench soak`` runs the long mixed load with faults, ``python -m bench
anatomy`` weighs the parts of one call's ``execute``, ``python -m bench remote`` puts the API
far away, and ``python -m bench pairs`` runs chosen rows in turn for an A/B (each has its own
``--help``).

The bench lives outside the product's packages: it is not in the wheel, and no toolfan
command imports it. It drives the real commands (``toolfan worker``, ``toolfan poll``,
``toolfan webhook``, ``toolfan emulator``) as subprocesses, with their default settings
unless a workload says otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.config import BenchConfig

#: Numeric options: flag, BenchConfig field, type, help (the default is added to the help).
NUMBERS: tuple[tuple[str, str, type, str], ...] = (
    ("--sessions", "sessions", int, "no-op sessions"),
    ("--calls", "calls", int, "calls per session"),
    ("--io-sessions", "io_sessions", int, "50 ms I/O sessions"),
    ("--io-concurrency", "io_concurrency", int, "threads (or greenlets) per I/O worker process"),
    (
        "--io-workers",
        "io_workers",
        int,
        "worker processes for the I/O workload (one per CPU: the threads of one process "
        "share one interpreter lock)",
    ),
    ("--loop-sessions", "loop_sessions", int, "I/O sessions for the sequential loop"),
    ("--idle-sessions", "idle_sessions", int, "idle sessions"),
    ("--half-load-seconds", "half_load_seconds", float, "length of the half-load run"),
    ("--interval", "poll_interval", float, "poll interval, seconds"),
    ("--reps", "reps", int, "repetitions of each throughput measurement (median reported)"),
    ("--seed", "seed", int, "seed of the half-load arrivals"),
    ("--broker-db", "broker_db", int, "broker database"),
    ("--ledger-db", "ledger_db", int, "results and ledger database"),
)


def build_parser() -> argparse.ArgumentParser:
    """The bench's options, each defaulting to :class:`BenchConfig`'s value."""
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Starts its own emulator, workers and poller on two Redis databases "
        "(flushed at start and end), runs no-op and 50 ms I/O workloads through toolfan and "
        "three baselines, polls idle sessions, and checks the performance targets. Writes "
        "bench.json, bench.txt and bench.png to --out. Exits 0 even when a target fails.",
        epilog="Also: 'python -m bench curves --help' (cost curves against raw Celery), "
        "'python -m bench soak --help' (a long mixed load with faults), 'python -m bench "
        "anatomy --help' (one call's execute, part by part), 'python -m bench remote "
        "--help' (an API that answers later, on two worker layouts) and 'python -m bench "
        "pairs --help' (chosen rows in turn, for an A/B of a change or a setting).",
    )
    defaults = BenchConfig()
    for flag, field, kind, text in NUMBERS:
        value = getattr(defaults, field)
        shown = f"{value:,}" if kind is int else f"{value:g}"
        metavar = flag.removeprefix("--").replace("-", "_").upper()
        p.add_argument(
            flag, dest=field, type=kind, default=value, metavar=metavar, help=f"{text} ({shown})"
        )
    p.add_argument(
        "--io-pool",
        choices=("threads", "gevent"),
        default=defaults.io_pool,
        help="worker pool for the I/O workload (threads; gevent needs the gevent package)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    p.add_argument("--out", default=str(defaults.out), help=f"output directory ({defaults.out})")
    p.add_argument(
        "--redis-url", default=None, help="Redis server to use (default: TOOLFAN_REDIS_URL's)"
    )
    p.add_argument(
        "--private-redis",
        action="store_true",
        help="start a private redis-server: Redis figures free of other clients' commands",
    )
    return p


def bench_config(args: argparse.Namespace) -> BenchConfig:
    """The configuration from the parsed options."""
    numbers = {field: getattr(args, field) for _, field, _, _ in NUMBERS}
    return BenchConfig(
        out=Path(args.out),
        io_pool=args.io_pool,
        redis_url=args.redis_url,
        private_redis=args.private_redis,
        quick=args.quick,
        **numbers,
    )


#: ``python -m bench NAME ...``: the other runs, each a module with its own ``main(argv)``.
SUBCOMMANDS = ("anatomy", "curves", "pairs", "remote", "soak")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench; a SIGTERM or SIGHUP stops its services first, as Ctrl-C does."""
    from dispatcher.devstack import until_stopped

    return until_stopped(
        "python -m bench", lambda: _main(list(sys.argv[1:] if argv is None else argv))
    )


def _main(argv: list[str]) -> int:
    """Parse the options and run the bench (or hand over to a subcommand's module)."""
    if argv and argv[0] in SUBCOMMANDS:
        import importlib

        module = importlib.import_module(f"bench.{argv[0]}")
        code: int = module.main(argv[1:])
        return code
    args = build_parser().parse_args(argv)
    if args.reps < 1:
        print("python -m bench: --reps must be at least 1", file=sys.stderr)
        return 2
    from bench.run import run_bench

    return run_bench(bench_config(args))


if __name__ == "__main__":
    sys.exit(main())
