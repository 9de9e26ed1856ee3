"""The list endpoint's page faults: a cursor that never advances, pages without end, garbage."""

from __future__ import annotations

import gc
import json
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types.beta.agent_session import AgentSession

from emulator import EmulatorServer, Faults


@pytest.fixture
def three(emu: EmulatorServer) -> list[str]:
    """Three real sessions, newest first (the default order)."""
    return [emu.state.create_session(session_id=f"s{i}")["id"] for i in (1, 2, 3)][::-1]


def _page(http: httpx.Client, **params: Any) -> dict[str, Any]:
    response = http.get("/agents/sessions", params={"limit": 2, **params})
    assert response.status_code == 200
    return dict(response.json())


def test_faults_default_off_and_are_validated(admin: httpx.Client) -> None:
    defaults = admin.get("/faults").json()
    assert (defaults["list_repeat_cursor"], defaults["list_endless"]) == (False, False)
    assert defaults["list_garbage"] is None
    for bad in ({"list_garbage": "junk"}, {"list_endless": 1}, {"list_repeat_cursor": "yes"}):
        assert admin.put("/faults", json=bad).status_code == 400
    with pytest.raises(ValueError, match="list_garbage"):
        Faults(list_garbage="junk")
    put = admin.put("/faults", json={"list_garbage": "deep", "list_endless": True}).json()
    assert (put["list_garbage"], put["list_endless"]) == ("deep", True)
    assert admin.post("/reset").status_code == 200
    assert admin.get("/faults").json()["list_garbage"] is None


def test_repeat_cursor_serves_the_same_page_forever(
    emu: EmulatorServer, http: httpx.Client, sdk: OpenAI, three: list[str]
) -> None:
    emu.state.set_faults(list_repeat_cursor=True)

    first = _page(http)
    second = _page(http, after=first["last_id"])
    last = _page(http, after=three[-1])

    for page in (first, second, last):
        assert [s["id"] for s in page["data"]] == three[:2]
        assert page["has_more"] is True
    sdk_page = sdk.beta.agents.sessions.list(limit=2)
    assert sdk_page.has_next_page()
    assert [s.id for s in sdk_page.get_next_page().data] == three[:2]


def test_endless_goes_on_with_fresh_synthetic_sessions(
    emu: EmulatorServer, http: httpx.Client, three: list[str]
) -> None:
    emu.state.set_faults(list_endless=True)
    seen: list[str] = []
    after: str | None = None

    for _ in range(5):
        page = _page(http, **({"after": after} if after else {}))
        assert page["has_more"] is True
        assert len(page["data"]) == 2
        seen.extend(s["id"] for s in page["data"])
        after = page["last_id"]

    synthetic = [f"sess_endless_{n:012d}" for n in range(1, 8)]
    assert seen == three + synthetic
    assert len(set(seen)) == len(seen)  # every page brings new ids
    assert http.get(f"/agents/sessions/{synthetic[0]}").status_code == 404  # listed only


def test_endless_sessions_match_the_filters_and_parse_strictly(
    emu: EmulatorServer, http: httpx.Client
) -> None:
    emu.state.set_faults(list_endless=True)

    page = _page(http, agent_id="agent_x", **{"metadata[team]": "a"})

    for raw in page["data"]:
        session = AgentSession.model_validate(raw)
        assert (session.status, session.agent.id, session.metadata) == (
            "idle",
            "agent_x",
            {"team": "a"},
        )
    assert page["has_more"] is True


def test_garbage_not_json(emu: EmulatorServer, http: httpx.Client, three: list[str]) -> None:
    emu.state.set_faults(list_garbage="not_json")

    response = http.get("/agents/sessions")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == b"not json"
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_garbage_deep(emu: EmulatorServer, http: httpx.Client, three: list[str]) -> None:
    emu.state.set_faults(list_garbage="deep", list_repeat_cursor=True)  # garbage wins

    body = http.get("/agents/sessions").content

    opened = body.count(b"[") + body.count(b"{")
    assert opened == 5000
    assert body.startswith(b'{"object":"list","data":[[[')
    # The garbage collector stays off while the parser is deep: a collection that ran
    # there would run other objects' finalizers at the recursion limit, and their
    # RecursionError (reported as unraisable) would fail this test, not the parse.
    gc.collect()
    gc.disable()
    try:
        with pytest.raises(RecursionError):
            json.loads(body)
    finally:
        gc.enable()


def test_garbage_array(emu: EmulatorServer, http: httpx.Client, three: list[str]) -> None:
    emu.state.set_faults(list_garbage="array")

    body = http.get("/agents/sessions", params={"limit": 2}).json()

    assert isinstance(body, list)
    assert [s["id"] for s in body] == three[:2]


def test_other_faults_still_come_first(emu: EmulatorServer, http: httpx.Client) -> None:
    emu.state.set_faults(list_garbage="not_json", error_rate=1.0, budget=1)

    assert http.get("/agents/sessions").status_code == 500
    assert http.get("/agents/sessions").content == b"not json"
    assert http.get("/agents/sessions/s1").status_code == 404  # other endpoints: unaffected
