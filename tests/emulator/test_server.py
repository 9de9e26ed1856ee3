"""How the emulator serves: its HTTP parser, and request heads of any size."""

from __future__ import annotations

import httpx
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from emulator import EmulatorServer
from tests.emulator.conftest import HEADERS


def test_requests_are_parsed_by_httptools_where_it_is_installed(emu: EmulatorServer) -> None:
    """The stand-in's HTTP parsing was a third of its CPU per request with h11."""
    assert emu._server.config.http_protocol_class is HttpToolsProtocol


def test_a_request_head_of_a_mebibyte_is_answered(emu: EmulatorServer) -> None:
    """A hostile header or id makes a huge head: the stand-in answers it, as an API would."""
    emu.state.create_session([], session_id="s1")
    headers = {**HEADERS, "X-Padding": "x" * (1 << 20)}
    answer = httpx.get(f"{emu.base_url}/agents/sessions/s1", headers=headers, timeout=30)
    assert answer.status_code == 200
    assert answer.json()["id"] == "s1"
