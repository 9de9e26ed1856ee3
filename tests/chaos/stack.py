"""The chaos run's own stack: Redis databases, the emulator, two workers and a poller.

It is isolated from the test suite's (which uses databases 14 and 15 and a session-wide
worker): its own broker and ledger databases, flushed at start and at the end, its own
emulator, and processes it starts and stops itself, each in its own process group.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from dataclasses import dataclass
from pathlib import Path

import redis

from dispatcher.devstack import Service, Stack, redis_base_url
from emulator import EmulatorServer, EmulatorState, running_emulator
from emulator.testing import TEST_API_KEY
from tests.chaos.keys import BUSY
from tests.owned import OwnedDatabases

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class StackConfig:
    """Where the stack keeps its data and how its services are tuned.

    ``queue_budget`` and ``grace`` stay at toolfan's defaults unless set: a killed worker's
    calls are redone once it has missed its heartbeats (``TOOLFAN_DEAD_AFTER``), not when a
    claim's lease runs out, so the run needs no shortened budget to recover in seconds.
    """

    workdir: Path
    broker_db: int = 10
    ledger_db: int = 11
    workers: int = 2
    concurrency: int = 2
    queue_budget: float | None = None
    grace: float | None = None
    poll_interval: float = 0.3


def proc_children(pid: int) -> list[int]:
    """The live child processes of ``pid``, read from /proc (no ``ps`` needed)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(entry.name))
    return children


class ChaosStack(Stack):
    """The running services, and the two ways of killing workers."""

    def __init__(self, config: StackConfig) -> None:
        super().__init__()
        self.config = config
        self.workers: list[Service] = []
        self.poller: Service | None = None
        self._started = 0
        self._env: dict[str, str] = {}
        self._base = ""
        self.databases: OwnedDatabases | None = None
        self.emulator: EmulatorServer | None = None

    # --- life cycle --------------------------------------------------------------------

    def _start(self) -> None:
        url = os.environ.get("TOOLFAN_REDIS_URL", "redis://localhost:6379/0")
        self._base = self._stack.enter_context(redis_base_url(url))
        dbs = (self.config.broker_db, self.config.ledger_db)
        self.databases = OwnedDatabases(self._base, dbs, "chaos")
        self.databases.flush()
        self._stack.callback(self.databases.flush)
        self.databases.mark()
        self.emulator = self._stack.enter_context(running_emulator())
        self._env = self._service_env(self.emulator.base_url)
        self._stack.callback(self.stop_services)
        for _ in range(self.config.workers):
            self.start_worker()
        for worker in self.workers:
            worker.wait_for_output(" ready.", 90)
        interval = str(self.config.poll_interval)
        self.poller = Service(["poll", "--interval", interval], self._log("poller"), self._env)
        self.poller.wait_for_output("poll:", 60)

    @property
    def state(self) -> EmulatorState:
        """The emulator's state, to seed sessions, set faults and read batches."""
        assert self.emulator is not None
        return self.emulator.state

    def ledger_url(self) -> str:
        """The Redis database holding the ledger, the results and the tools' counters."""
        return f"{self._base}/{self.config.ledger_db}"

    def redis(self) -> redis.Redis:
        """A client of the ledger database."""
        return redis.Redis.from_url(self.ledger_url(), decode_responses=True)

    def stop_services(self) -> None:
        """Stop the poller and every worker (idempotent), so counters stop changing."""
        for service in [*([self.poller] if self.poller else []), *self.workers]:
            service.stop()
        self.poller = None
        self.workers = []

    def check_databases(self) -> None:
        """Make sure nothing else flushed or reused the databases (see tests.owned)."""
        assert self.databases is not None
        self.databases.check()

    def _service_env(self, base_url: str) -> dict[str, str]:
        """The environment of every service: ours only, none of the caller's toolfan settings."""
        ours = ("TOOLFAN_", "OPENAI_", "PYTEST_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
        path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env.update(
            PYTHONPATH=path,
            TOOLFAN_REDIS_URL=self.ledger_url(),
            TOOLFAN_BROKER_URL=f"{self._base}/{self.config.broker_db}",
            TOOLFAN_HANDLERS="tests.chaos.tools",
            TOOLFAN_SOURCES="agents,assistants",
            OPENAI_BASE_URL=base_url,
            OPENAI_API_KEY=TEST_API_KEY,
        )
        if self.config.queue_budget is not None:
            env["TOOLFAN_QUEUE_BUDGET"] = str(self.config.queue_budget)
        if self.config.grace is not None:
            env["TOOLFAN_TIME_LIMIT_GRACE"] = str(self.config.grace)
        return env

    def _log(self, name: str) -> Path:
        return self.config.workdir / f"{name}.log"

    # --- workers -----------------------------------------------------------------------

    def start_worker(self) -> Service:
        """Start one more prefork worker (not waiting for it to be ready)."""
        self._started += 1
        name = f"chaos{self._started}"
        args = ["worker", "-c", str(self.config.concurrency), "-n", f"{name}.{os.getpid()}@%h"]
        args += ["--without-mingle", "--without-gossip"]
        worker = Service(args, self._log(name), self._env)
        self.workers.append(worker)
        return worker

    def kill_child(self, rng: random.Random, aim: float = 0.75) -> int | None:
        """SIGKILL one pool process; its pid, or None if there was none.

        With probability ``aim`` the victim is one running a slow or charging tool right
        now (the tools say so in Redis), since a kill between calls tests little.
        """
        children = {
            pid: worker
            for worker in self.workers
            if worker.proc.poll() is None
            for pid in proc_children(worker.proc.pid)
        }
        busy = children.keys() & self._busy_pids()
        pool = busy if busy and rng.random() < aim else children.keys()
        if not pool:
            return None
        pid = rng.choice(sorted(pool))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return pid

    def _busy_pids(self) -> set[int]:
        client = self.redis()
        try:
            return {int(p) for p in client.smembers(BUSY)}
        finally:
            client.close()

    def kill_worker(self, rng: random.Random, ready_timeout: float = 90) -> Service:
        """SIGKILL a whole worker (main process and pool) and start a replacement.

        Messages it had reserved stay unacked in the broker; only the stale-claim path
        (lease expiry, then a re-dispatch of calls without saved results) recovers them.
        Returns the replacement once it is ready, so a worker is always serving.
        """
        victim = rng.choice(self.workers)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.stop()
        self.workers.remove(victim)
        replacement = self.start_worker()
        replacement.wait_for_output(" ready.", ready_timeout)
        return replacement

    def logs(self) -> dict[str, str]:
        """Every service log written so far, by file name."""
        return {p.name: p.read_text(errors="replace") for p in self.config.workdir.glob("*.log")}
