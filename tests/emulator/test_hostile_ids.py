"""Ids holding any character reach their session over real HTTP, and every answer survives them."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest
from openai import OpenAI
from openai.types.beta.agent_session_input_param import (
    SessionInputParamAgentSessionInputToolResult,
)

from emulator import EmulatorServer, function_call

HOSTILE_IDS = [
    "a/b",
    "/",
    "50%",
    "%2F",
    "a:b@c",
    "}{",
    "{session_id}",
    "line\nbreak",
    "tab\there",
    "nul\x00byte",
    "emoji 🙂 ✓",
    "?q=1#frag",
    "a/../b",
    "+ &=;",
    "x" * 10_000,
    "/" * 10_000,  # 30,000 bytes once percent-encoded: past h11's default 16 KiB head limit
]
SURROGATE_ID = "sess\ud800"


def _ids(value: str) -> str:
    return ascii(value[:20])


def _result(turn_id: str, call_id: str) -> SessionInputParamAgentSessionInputToolResult:
    return {
        "type": "agent.session.input.tool_result",
        "turn_id": turn_id,
        "call_id": call_id,
        "success": True,
        "output": "ok",
    }


def _encoded(value: str) -> str:
    """How a client names a string in a path: its surrogatepass bytes, percent-encoded."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@pytest.mark.parametrize("sid", HOSTILE_IDS, ids=_ids)
def test_sdk_retrieves_answers_and_streams_any_id(
    emu: EmulatorServer, sdk: OpenAI, sid: str
) -> None:
    turn_id, call_id = f"turn {sid[:50]}", f"call/{sid[:50]}"
    emu.state.create_session(
        [function_call("add", turn_id=turn_id, call_id=call_id)], session_id=sid
    )

    retrieved = sdk.beta.agents.sessions.retrieve(sid)
    first = next(iter(sdk.beta.agents.sessions.events.stream(sid)))
    sdk.beta.agents.sessions.events.create(sid, events=[_result(turn_id, call_id)])

    assert retrieved.id == sid
    assert first.session.id == sid  # type: ignore[union-attr]
    (batch,) = emu.state.batches(sid)
    assert batch.events == [_result(turn_id, call_id)]
    assert emu.state.session(sid)["required_actions"] == []


def test_admin_routes_take_any_id(emu: EmulatorServer, admin: httpx.Client) -> None:
    for sid in ("a/b", "50%", "line\nbreak", SURROGATE_ID):
        # httpx's json= cannot encode a lone surrogate: send json.dumps' ASCII escapes.
        created = admin.post("/sessions", content=json.dumps({"session_id": sid}))
        assert created.status_code == 201
        added = admin.post(
            f"/sessions/{_encoded(sid)}/actions",
            json={"function_calls": [{"name": "f", "turn_id": "t", "call_id": "c"}]},
        )
        assert added.status_code == 200
        assert json.loads(admin.get(f"/sessions/{_encoded(sid)}").content)["id"] == sid
        assert emu.state.session(sid)["status"] == "requires_action"


def test_a_lone_surrogate_id_round_trips_over_raw_http(
    emu: EmulatorServer, http: httpx.Client
) -> None:
    emu.state.create_session(
        [function_call("f", turn_id="t\udfff", call_id="c")], session_id=SURROGATE_ID
    )
    body = b'{"events":[{"type":"agent.session.input.tool_result","turn_id":"t\\udfff",'
    body += b'"call_id":"c","success":true,"output":"\\ud800"}]}'
    path = f"/agents/sessions/{_encoded(SURROGATE_ID)}"

    retrieved = http.get(path)
    listed = http.get("/agents/sessions")
    posted = http.post(f"{path}/events", content=body, headers={"Idempotency-Key": "k"})
    replayed = http.post(f"{path}/events", content=body, headers={"Idempotency-Key": "k"})

    assert retrieved.status_code == 200
    assert b'"id":"sess\\ud800"' in retrieved.content  # escaped: the body is ASCII
    assert retrieved.content.isascii()
    assert b'"id":"sess\\ud800"' in listed.content
    assert (posted.status_code, replayed.status_code) == (202, 202)
    (batch,) = emu.state.batches(SURROGATE_ID)
    assert batch.events[0]["output"] == "\ud800"
    with http.stream("GET", f"{path}/events") as stream:
        frame = next(line for line in stream.iter_lines() if line.startswith("data: "))
    assert json.loads(frame.removeprefix("data: "))["session"]["id"] == SURROGATE_ID


def test_errors_about_hostile_ids_are_ascii_json(http: httpx.Client) -> None:
    response = http.get(f"/agents/sessions/{_encoded(SURROGATE_ID + '/missing')}")

    assert response.status_code == 404
    assert response.content.isascii()
    assert SURROGATE_ID in json.loads(response.content)["error"]["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/agents/sessions/%2E",
        "/agents/sessions/%2e%2E",
        "/agents/sessions/%2E%2E/events",
        "/agents/sessions/",
        "/agents/sessions//events",
        "/agents/sessions/%FF",  # no string encodes to these bytes
        "/agents/sessions/a/b",
        "/agents%2Fsessions",
    ],
)
def test_dot_segments_and_undecodable_paths_are_404(
    emu: EmulatorServer, http: httpx.Client, path: str
) -> None:
    for sid in (".", "..", "a", "\udcff"):
        emu.state.create_session(session_id=sid)

    response = http.get(path)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_url"


def test_list_cursor_pages_through_hostile_ids(emu: EmulatorServer, sdk: OpenAI) -> None:
    created = [emu.state.create_session(session_id=sid)["id"] for sid in HOSTILE_IDS]

    listed = [s.id for s in sdk.beta.agents.sessions.list(limit=1, order="asc")]

    assert listed == created


def test_list_cursor_takes_a_surrogate_id(emu: EmulatorServer, http: httpx.Client) -> None:
    for sid in (SURROGATE_ID, "next"):
        emu.state.create_session(session_id=sid)

    after = http.get(f"/agents/sessions?order=asc&after={_encoded(SURROGATE_ID)}")
    undecodable = http.get("/agents/sessions?after=%FF")

    assert [s["id"] for s in after.json()["data"]] == ["next"]
    assert undecodable.status_code == 400
    assert undecodable.json()["error"]["param"] == "after"


def test_request_log_shows_decoded_and_raw_paths(
    emu: EmulatorServer, sdk: OpenAI, admin: httpx.Client
) -> None:
    emu.state.create_session(session_id="a/b")
    emu.state.create_session(session_id="plain")
    sdk.beta.agents.sessions.retrieve("a/b")
    sdk.beta.agents.sessions.retrieve("plain")

    (record,) = emu.state.requests("/a/b")

    assert record.path == "/v1/agents/sessions/a/b"
    assert record.raw_path == "/v1/agents/sessions/a%2Fb"
    assert emu.state.requests("a%2Fb") == [record]
    assert [r.path for r in emu.state.requests("/plain")] == ["/v1/agents/sessions/plain"]
    logged = admin.get("/requests", params={"path": "a%2Fb"}).json()["data"]
    assert [r["raw_path"] for r in logged] == ["/v1/agents/sessions/a%2Fb"]


def test_a_body_nested_too_deep_to_parse_is_400(emu: EmulatorServer, http: httpx.Client) -> None:
    sid = emu.state.create_session()["id"]

    response = http.post(f"/agents/sessions/{sid}/events", content=b"[" * 100_000)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_trailing_slashes_are_404_not_redirects(emu: EmulatorServer, http: httpx.Client) -> None:
    emu.state.create_session(session_id="s")

    for path in ("/agents/sessions/", "/agents/sessions/s/"):
        response = http.get(path, follow_redirects=False)
        assert response.status_code == 404
