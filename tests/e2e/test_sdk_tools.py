"""Tools written for the official SDK, answered by a real fleet: worker and poller processes.

The suite's shared worker and in-process poller load the suite's tool modules, so this test
runs a stack of its own with ``TOOLFAN_HANDLERS=tests.sdk_tools`` (a ``toolfan worker`` and a
``toolfan poll``) on Redis databases 2 (broker) and 3 (ledger), flushed at start and end,
answering a session of the suite's emulator.
"""

import os
import re
from collections.abc import Iterator

import pytest

from dispatcher.devstack import Service
from emulator import function_call
from tests.conftest import worker_env
from tests.owned import OwnedDatabases
from tests.services import Worker, wait_for

BROKER_DB, LEDGER_DB = 2, 3


@pytest.fixture
def fleet(api, tmp_path) -> Iterator[Worker]:
    """A worker and a poller of their own, both loading the SDK tools module."""
    base = re.sub(r"/\d+$", "", os.environ["TOOLFAN_REDIS_URL"])
    databases = OwnedDatabases(base, (BROKER_DB, LEDGER_DB), "sdk-tools")
    databases.flush()
    env = worker_env(
        TOOLFAN_REDIS_URL=f"{base}/{LEDGER_DB}",
        TOOLFAN_BROKER_URL=f"{base}/{BROKER_DB}",
        TOOLFAN_HANDLERS="tests.sdk_tools",
    )
    args = ["-c", "2", "-P", "prefork", "-n", "sdk@%h", "--without-mingle", "--without-gossip"]
    worker = Worker(args, tmp_path / "worker.log", env)
    poller: Service | None = None
    try:
        worker.wait_ready()
        poller = Service(["poll", "--interval", "0.2"], tmp_path / "poller.log", env)
        yield worker
    finally:
        if poller is not None:
            poller.stop()
        worker.stop()
        databases.flush()


CALLS = {
    "weather": ("sdk_weather", {"city": "Oslo", "unit": None, "days": 2}),
    "echo": ("sdk_echo", {"text": "hello", "parts": False, "delay": 0.1}),
    "parts": ("sdk_echo", {"text": "hi", "parts": True, "delay": None}),
    "empty": ("sdk_echo", {"text": ""}),
    "lookup": ("sdk_lookup", {"order_id": "7", "verbose": True}),
    "nap": ("sdk_nap", {"seconds": 0}),
    "overslept": ("sdk_nap", {"seconds": 3}),
    "boom": ("sdk_weather", {"city": "Atlantis"}),
    "invalid": ("sdk_weather", {"unit": "kelvin"}),
    "nan": ("sdk_lookup", {"order_id": "nan"}),
}


def test_a_session_calling_sdk_tools_is_answered_by_the_fleet(api, fleet):
    calls = [function_call(n, a, turn_id="t", call_id=c) for c, (n, a) in CALLS.items()]
    sid = api.create_session(calls)["id"]
    wait_for(lambda: api.batches(sid), 60, "the answer", 0.1)
    batches = api.batches(sid)
    assert len(batches) == 1
    events = {e["call_id"]: e for e in batches[0].events}
    assert set(events) == set(CALLS)
    ok = {c: e["output"] for c, e in events.items() if e["success"]}
    assert ok == {
        "weather": '{"city":"Oslo","unit":"celsius","days":2}',
        "echo": "hello",
        "parts": [{"type": "input_text", "text": "hi"}],
        "empty": "",
        "lookup": '{"id":"7","status":"shipped","verbose":true}',
        "nap": "awake",
    }
    errors = {c: e["error"] for c, e in events.items() if not e["success"]}
    assert errors["overslept"] == "Function 'sdk_nap' timed out after 0.5 s"
    assert errors["boom"] == "Function 'sdk_weather' failed: LookupError: no forecast for Atlantis"
    assert errors["invalid"].startswith("Invalid arguments for sdk_weather: city: Field required")
    assert errors["nan"].startswith("Function 'sdk_lookup' returned an unusable output")
    assert "LookupError" in fleet.log()  # the traceback went to the worker's log
