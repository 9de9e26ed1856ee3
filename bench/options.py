"""The options every no-op A/B run of the bench shares: its size and the stack it runs on."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from bench.config import BenchConfig


def add_stack_options(p: argparse.ArgumentParser, bench: BenchConfig, size: str) -> None:
    """``--sessions``, ``--calls``, ``--out`` and the Redis options, defaulting to ``bench``'s.

    ``size`` names what ``--sessions`` counts (sessions, or sessions and runs).
    """
    p.add_argument("--sessions", type=int, default=bench.sessions, help=f"{size} (400)")
    p.add_argument("--calls", type=int, default=bench.calls, help="calls per session (5)")
    p.add_argument("--out", default=str(bench.out), help=f"output directory ({bench.out})")
    p.add_argument("--redis-url", default=None, help="Redis server (default: TOOLFAN_REDIS_URL's)")
    p.add_argument("--private-redis", action="store_true", help="start a private redis-server")
    p.add_argument("--broker-db", type=int, default=bench.broker_db, help="broker database (4)")
    p.add_argument(
        "--ledger-db", type=int, default=bench.ledger_db, help="results and ledger database (5)"
    )


def stack_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> BenchConfig:
    """The bench configuration the stack options give (a count below 1 is refused).

    Raises:
        SystemExit: ``--sessions`` or ``--calls`` is below 1 (argparse's exit, code 2).
    """
    for name in ("sessions", "calls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return replace(
        BenchConfig(),
        out=Path(args.out),
        sessions=args.sessions,
        calls=args.calls,
        redis_url=args.redis_url,
        private_redis=args.private_redis,
        broker_db=args.broker_db,
        ledger_db=args.ledger_db,
    )
