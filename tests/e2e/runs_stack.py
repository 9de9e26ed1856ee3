"""A stack of its own for the run-shaped source: Redis databases, emulator, worker, poller.

The suite's shared worker delivers with the suite's environment; a flavour (Azure OpenAI,
Foundry) is a matter of the environment every process reads, so each flavour gets its own
worker and its own ``toolfan poll`` with ``TOOLFAN_SOURCES=assistants``, on databases 12
(broker) and 13 (ledger), flushed at start and end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from dispatcher.devstack import Service, Stack, redis_base_url
from emulator import EmulatorServer, EmulatorState, running_emulator
from emulator.testing import TEST_API_KEY
from tests.owned import OwnedDatabases

if TYPE_CHECKING:
    from dispatcher.sources.assistants_client import AssistantsClient
    from dispatcher.sources.assistants_poll import RunsPoller

ROOT = Path(__file__).resolve().parents[2]
BROKER_DB, LEDGER_DB = 12, 13


def flavour_env(flavour: str, url: str) -> dict[str, str]:
    """The variables a user of each flavour sets (their SDKs' own), pointing at ``url``."""
    if flavour == "azure-openai":
        return {"AZURE_OPENAI_ENDPOINT": url, "AZURE_OPENAI_API_KEY": TEST_API_KEY}
    if flavour == "foundry":
        return {
            "AZURE_AI_PROJECT_ENDPOINT": f"{url}/api/projects/toolfan-test",
            "AZURE_AI_AGENTS_TOKEN": TEST_API_KEY,
        }
    return {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": TEST_API_KEY}


class RunsStack(Stack):
    """Emulator, one worker and one poller of the ``assistants`` source."""

    def __init__(
        self, workdir: Path, flavour: str = "openai", interval: str = "0.3", **env: str
    ) -> None:
        super().__init__()
        self.workdir = workdir
        self.flavour = flavour
        self.interval = interval
        self.extra = env
        self.emulator: EmulatorServer | None = None
        self.env: dict[str, str] = {}
        self.poller: Service | None = None
        self._base = ""

    def _start(self) -> None:
        url = os.environ.get("TOOLFAN_REDIS_URL", "redis://localhost:6379/0")
        self._base = self._stack.enter_context(redis_base_url(url))
        databases = OwnedDatabases(self._base, (BROKER_DB, LEDGER_DB), "runs")
        databases.flush()
        self._stack.callback(databases.flush)
        self.emulator = self._stack.enter_context(running_emulator())
        origin = self.emulator.base_url.rsplit("/v1", 1)[0]
        self.env = self._service_env(origin)
        worker = self.service(["worker", "-c", "4", "-P", "threads", "-n", "runs@%h"], "worker")
        worker.wait_for_output(" ready.", 90)
        self.poller = self.service(["poll", "--interval", self.interval], "poller")
        self.poller.wait_for_output("runs:", 60)

    def service(self, args: list[str], name: str) -> Service:
        """Start one more toolfan command in this stack's environment."""
        service = Service(args, self.workdir / f"{name}.log", self.env)
        self._stack.callback(service.stop)
        return service

    @property
    def state(self) -> EmulatorState:
        """The emulator's state: create runs, read submits."""
        assert self.emulator is not None
        return self.emulator.state

    def redis(self) -> redis.Redis:
        """A client of the stack's ledger database."""
        return redis.Redis.from_url(f"{self._base}/{LEDGER_DB}", decode_responses=True)

    def runs_poller(
        self,
        client_class: type[AssistantsClient] | None = None,
        ledger_client: redis.Redis | None = None,
        **settings: Any,
    ) -> RunsPoller:
        """A runs poller in the test process, on this stack's emulator and ledger.

        ``settings`` override the defaults; ``client_class`` may wrap the real client;
        ``ledger_client`` puts its ledger and watches elsewhere, out of the stack's
        poller's sight.
        """
        from dispatcher.sources.assistants_client import AssistantsClient
        from dispatcher.sources.assistants_config import load_config
        from dispatcher.sources.assistants_poll import RunsPoller
        from tasks.ledger import Ledger
        from tasks.settings import Settings

        client = (client_class or AssistantsClient)(load_config(self.env))
        self._stack.callback(client.close)
        ledger = Ledger(ledger_client or self.redis(), 3600, "assistants")
        return RunsPoller(client, ledger, Settings(**settings))

    def _service_env(self, origin: str) -> dict[str, str]:
        ours = ("TOOLFAN_", "OPENAI_", "AZURE_", "PYTEST_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
        env.update(
            PYTHONPATH=str(ROOT),
            TOOLFAN_REDIS_URL=f"{self._base}/{LEDGER_DB}",
            TOOLFAN_BROKER_URL=f"{self._base}/{BROKER_DB}",
            TOOLFAN_HANDLERS="tests.tools",
            TOOLFAN_SOURCES="assistants",
            **flavour_env(self.flavour, origin),
            **self.extra,
        )
        return env
