"""The bench's options: one frozen value object, with the full and the ``--quick`` sizes."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

NOOP_TOOL = "bench_noop"
IO_TOOL = "bench_io"
#: The no-op tool again, with an allow-all policy: what a policy costs per call.
POLICY_TOOL = "bench_noop_policy"
#: The no-op tool again, needing approval: what an approval costs per call.
APPROVED_TOOL = "bench_noop_approved"


@dataclass(frozen=True)
class Workload:
    """S sessions x K calls of one tool, on one kind of worker pool.

    ``loop_sessions`` caps the sequential-loop baseline: its rate is constant, so running
    it on a subset gives the same calls/s without minutes of sleeping. ``workers`` is how
    many worker processes (each with ``concurrency``) serve it; the thread-pool baseline
    gets as many threads in total. A ``pool`` or ``concurrency`` of None is the worker's
    default (prefork, one process per CPU): what ``toolfan worker`` runs with no options.
    """

    name: str
    tool: str
    arguments: dict[str, int]
    pool: str | None
    concurrency: int | None
    sessions: int
    calls: int
    loop_sessions: int
    workers: int = 1

    @property
    def total_calls(self) -> int:
        """Calls in the workload."""
        return self.sessions * self.calls

    @property
    def processes(self) -> int:
        """Calls one worker runs at once: its concurrency, or ``toolfan worker``'s default.

        The bench's workers get no ``TOOLFAN_*`` setting of the caller's, so the default is
        that of no settings. Imported here, not above: importing ``tasks`` loads the Celery
        app, which the bench configures for its own stack first (:func:`bench.run.use_stack_env`).
        """
        if self.concurrency:
            return self.concurrency
        from tasks.config import worker_concurrency
        from tasks.settings import Settings

        return worker_concurrency(Settings())

    @property
    def queue(self) -> str:
        """The tool's queue (``fn.<name>``)."""
        return f"fn.{self.tool}"


@dataclass(frozen=True)
class BenchConfig:
    """Everything one bench run needs to know."""

    out: Path = Path("bench-results")
    sessions: int = 400
    calls: int = 5
    io_sessions: int = 600
    io_ms: int = 50
    io_concurrency: int = 64
    io_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    io_pool: str = "threads"
    loop_sessions: int = 60
    idle_sessions: int = 100_000
    half_load_seconds: float = 15.0
    poll_interval: float = 0.2
    reps: int = 3
    seed: int = 1
    redis_url: str | None = None
    private_redis: bool = False
    broker_db: int = 4
    ledger_db: int = 5
    timeout: float = 300.0
    quick: bool = False

    def quick_sized(self) -> BenchConfig:
        """The smoke-test size: every phase runs, on tiny numbers."""
        return replace(
            self,
            sessions=20,
            calls=3,
            io_sessions=20,
            io_concurrency=16,
            io_workers=1,
            loop_sessions=10,
            idle_sessions=500,
            half_load_seconds=3.0,
            reps=2,
            timeout=60.0,
            quick=True,
        )

    def workloads(self) -> list[Workload]:
        """The no-op workload (the default worker) and the I/O one (threads, or gevent)."""
        noop = Workload(
            name="noop",
            tool=NOOP_TOOL,
            arguments={},
            pool=None,
            concurrency=None,
            sessions=self.sessions,
            calls=self.calls,
            loop_sessions=self.sessions,
        )
        io = Workload(
            name="io",
            tool=IO_TOOL,
            arguments={"ms": self.io_ms},
            pool=self.io_pool,
            concurrency=self.io_concurrency,
            sessions=self.io_sessions,
            calls=self.calls,
            loop_sessions=min(self.loop_sessions, self.io_sessions),
            workers=self.io_workers,
        )
        return [noop, io]

    def idle_pages(self) -> int:
        """List requests one pass over the idle sessions should make (100 per page)."""
        return math.ceil(self.idle_sessions / 100)
