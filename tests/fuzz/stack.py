"""The fuzz run's own stack: two Redis databases, an in-process emulator, one real
``toolfan worker`` and one real ``toolfan poll --interval 0.5``.

Like the chaos run's, it is isolated from the test suite: its own broker and ledger
databases (6 and 7 unless told otherwise), flushed at start and at the end and marked
with a sentinel so a run that shared them with someone else is declared void, and
processes it starts and stops itself, each in its own process group. The services run
with toolfan's default settings: the environment carries only where Redis, the broker,
the tools and the API are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dispatcher.devstack import Service, Stack, redis_base_url
from emulator import EmulatorServer, EmulatorState, running_emulator
from emulator.testing import TEST_API_KEY
from tests.owned import OwnedDatabases

ROOT = Path(__file__).resolve().parents[2]
TOOLS_MODULE = "tests.fuzz.tools"


@dataclass(frozen=True)
class StackConfig:
    """Where the stack keeps its logs and data, and how often the poller polls."""

    workdir: Path
    broker_db: int = 6
    ledger_db: int = 7
    poll_interval: float = 0.5


@dataclass(frozen=True)
class Exit:
    """A service that was found dead before the run stopped it."""

    service: str
    returncode: int


class FuzzStack(Stack):
    """The running services; :meth:`exits` tells whether any of them died on its own."""

    def __init__(self, config: StackConfig) -> None:
        super().__init__()
        self.config = config
        self.worker: Service | None = None
        self.poller: Service | None = None
        self.emulator: EmulatorServer | None = None
        self._base = ""
        self.databases: OwnedDatabases | None = None

    def _start(self) -> None:
        url = os.environ.get("TOOLFAN_REDIS_URL", "redis://localhost:6379/0")
        self._base = self._stack.enter_context(redis_base_url(url))
        dbs = (self.config.broker_db, self.config.ledger_db)
        self.databases = OwnedDatabases(self._base, dbs, "fuzz")
        self.databases.flush()
        self._stack.callback(self.databases.flush)
        self.databases.mark()
        self.emulator = self._stack.enter_context(running_emulator())
        env = self._service_env(self.emulator.base_url)
        self._stack.callback(self.stop_services)
        name = f"fuzz{os.getpid()}@%h"
        args = ["worker", "-n", name, "--without-mingle", "--without-gossip"]
        self.worker = Service(args, self._log("worker"), env)
        self.worker.wait_for_output(" ready.", 90)
        interval = str(self.config.poll_interval)
        self.poller = Service(["poll", "--interval", interval], self._log("poller"), env)
        self.poller.wait_for_output("poll:", 60)

    @property
    def state(self) -> EmulatorState:
        """The emulator's state: seed sessions, set faults, read batches and requests."""
        assert self.emulator is not None
        return self.emulator.state

    def services(self) -> dict[str, Service]:
        """The services still running under this stack, by name."""
        pairs = {"worker": self.worker, "poller": self.poller}
        return {name: s for name, s in pairs.items() if s is not None}

    def exits(self) -> list[Exit]:
        """The services that exited by themselves (each one a crash)."""
        return [
            Exit(name, code)
            for name, service in self.services().items()
            if (code := service.proc.poll()) is not None
        ]

    def stop_services(self) -> None:
        """Stop the poller, then the worker (idempotent)."""
        for service in self.services().values():
            service.stop()
        self.poller = self.worker = None

    def check_databases(self) -> None:
        """Make sure nothing else flushed or reused the databases (see tests.owned)."""
        assert self.databases is not None
        self.databases.check()

    def _service_env(self, base_url: str) -> dict[str, str]:
        """Only where things are: none of the caller's toolfan settings, no tuning."""
        ours = ("TOOLFAN_", "OPENAI_", "PYTEST_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
        path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env.update(
            PYTHONPATH=path,
            TOOLFAN_REDIS_URL=f"{self._base}/{self.config.ledger_db}",
            TOOLFAN_BROKER_URL=f"{self._base}/{self.config.broker_db}",
            TOOLFAN_HANDLERS=TOOLS_MODULE,
            OPENAI_BASE_URL=base_url,
            OPENAI_API_KEY=TEST_API_KEY,
        )
        return env

    def _log(self, name: str) -> Path:
        return self.config.workdir / f"{name}.log"

    def logs(self) -> dict[str, str]:
        """Every service log written so far, by service name."""
        return {p.stem: p.read_text(errors="replace") for p in self.config.workdir.glob("*.log")}
