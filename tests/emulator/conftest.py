"""An emulator on a real port for the whole session, reset before every test."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from emulator import EmulatorServer, running_emulator
from emulator.testing import TEST_API_KEY

#: A valid tool result for call ``c1`` of turn ``t1``, the call the tests seed.
RESULT = {
    "type": "agent.session.input.tool_result",
    "turn_id": "t1",
    "call_id": "c1",
    "success": True,
    "output": "3",
}

HEADERS = {"Authorization": f"Bearer {TEST_API_KEY}", "OpenAI-Beta": "agents=v1"}


@pytest.fixture(scope="session")
def emulator_server() -> Iterator[EmulatorServer]:
    with running_emulator() as server:
        yield server


@pytest.fixture
def emu(emulator_server: EmulatorServer) -> EmulatorServer:
    state = emulator_server.state
    state.reset()
    state.turn_duration = 0.2
    state.stream_lifetime = 10.0
    return emulator_server


@pytest.fixture
def http(emu: EmulatorServer) -> Iterator[httpx.Client]:
    """A raw HTTP client on the /v1 root, authenticated like the SDK."""
    with httpx.Client(base_url=emu.base_url, headers=HEADERS, timeout=5.0) as client:
        yield client


@pytest.fixture
def admin(emu: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{emu.url}/_emulator", timeout=5.0) as client:
        yield client


@pytest.fixture
def sdk(emu: EmulatorServer) -> Iterator[OpenAI]:
    client = OpenAI(api_key=TEST_API_KEY, base_url=emu.base_url, max_retries=0, timeout=5.0)
    yield client
    client.close()
