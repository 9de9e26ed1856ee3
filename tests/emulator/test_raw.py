"""Raw JSON texts a session serves verbatim: fields and required actions Python cannot render."""

from __future__ import annotations

import json
import secrets

import httpx
import pytest

from emulator import EmulatorServer, EmulatorState, RawJson, function_call
from emulator.jsontext import check_json_text, dumps

BIG_NUMBER = "1" * 5000
DEEP = "[" * 5000 + "]" * 5000
DEEP_CALL = (
    '{"type":"function_call","turn_id":"t1","call_id":"c1","name":"f","arguments":{"x":'
    + DEEP
    + "}}"
)
BIG_CALL = (
    '{"type": "function_call", "turn_id": "t2", "call_id": "c2", "name": "g",'
    f' "arguments": {{"n": {BIG_NUMBER}}}}}'
)
RAW = {"created_at": BIG_NUMBER, "metadata": '{"team": 5}', "extra\n": "\n[\r\n1]"}
RAW_ACTIONS = [
    {"json": DEEP_CALL, "turn_id": "t1", "call_id": "c1"},
    {"json": BIG_CALL, "turn_id": "t2", "call_id": "c2"},
]


def _answer(turn_id: str, call_id: str) -> dict[str, object]:
    return {
        "type": "agent.session.input.tool_result",
        "turn_id": turn_id,
        "call_id": call_id,
        "success": False,
        "error": "arguments cannot be parsed",
    }


@pytest.fixture
def raw_session(emu: EmulatorServer) -> str:
    emu.state.create_session(
        [function_call("add", turn_id="t0", call_id="c0")],
        session_id="sess_raw",
        raw=RAW,
        raw_actions=RAW_ACTIONS,
    )
    return "sess_raw"


def _assert_raw(body: bytes, line_break: bytes = b"\r\n") -> None:
    assert f'"created_at":{BIG_NUMBER},'.encode() in body
    assert b'"metadata":{"team": 5},' in body
    assert b'"extra\\n":\n[' + line_break + b"1]" in body
    assert f"{DEEP_CALL},{BIG_CALL}]".encode() in body  # after the plain action, in order
    assert b'"call_id":"c0"' in body


def test_raw_fields_and_actions_are_served_verbatim(
    http: httpx.Client, admin: httpx.Client, raw_session: str
) -> None:
    _assert_raw(http.get(f"/agents/sessions/{raw_session}").content)
    _assert_raw(http.get("/agents/sessions").content)
    _assert_raw(admin.get(f"/sessions/{raw_session}").content)


def test_raw_texts_with_line_breaks_span_sse_data_lines(
    http: httpx.Client, raw_session: str
) -> None:
    lines: list[str] = []
    with http.stream("GET", f"/agents/sessions/{raw_session}/events") as stream:
        for line in stream.iter_lines():
            if line == "" and lines:
                break
            lines.append(line)

    assert lines[0] == "event: agent.session.requires_action"
    data = "\n".join(line.removeprefix("data: ") for line in lines[1:])  # how clients join them
    assert all(line.startswith("data: ") for line in lines[1:])
    _assert_raw(data.encode(), line_break=b"\n")  # any line break arrives as "\n": whitespace


def test_raw_actions_are_pending_and_answerable(
    emu: EmulatorServer, http: httpx.Client, raw_session: str
) -> None:
    url = f"/agents/sessions/{raw_session}/events"

    unknown = http.post(url, json={"events": [_answer("t1", "c9")]})
    answered = http.post(url, json={"events": [_answer("t1", "c1"), _answer("t0", "c0")]})
    again = http.post(url, json={"events": [_answer("t1", "c1")]})

    assert (unknown.status_code, answered.status_code, again.status_code) == (409, 202, 409)
    body = http.get(f"/agents/sessions/{raw_session}").content
    assert DEEP_CALL.encode() not in body
    assert f'"required_actions":[{BIG_CALL}]'.encode() in body
    assert http.post(url, json={"events": [_answer("t2", "c2")]}).status_code == 202
    assert emu.state.session(raw_session)["status"] == "in_progress"  # no action remains


def test_a_raw_status_keeps_the_stream_named_after_the_real_one(
    emu: EmulatorServer, http: httpx.Client
) -> None:
    sid = emu.state.create_session(raw={"status": '"bogus"'})["id"]

    text = http.get(f"/agents/sessions/{sid}/events").text  # idle: one frame, then closed

    assert text.startswith("event: agent.session.idle\n")
    assert '"status":"bogus"' in text


def test_admin_create_bulk_and_actions_take_raw_options(
    emu: EmulatorServer, admin: httpx.Client, http: httpx.Client
) -> None:
    created = admin.post("/sessions", json={"session_id": "s1", "raw": {"id": "5"}})
    bulk = admin.post(
        "/sessions/bulk", json={"sessions": [{"raw": {"id": "6"}}, {"session_id": "s3"}]}
    )
    added = admin.post(
        "/sessions/s3/actions",
        json={"raw_actions": [{"json": BIG_CALL, "turn_id": "t2", "call_id": "c2"}]},
    )

    assert created.status_code == 201
    assert created.content.startswith(b'{"id":5,')
    real_id, s3 = bulk.json()["data"]
    assert real_id.startswith("sess_")  # the real id, not the served one
    assert http.get(f"/agents/sessions/{real_id}").content.startswith(b'{"id":6,')
    assert s3 == "s3"
    assert BIG_CALL.encode() in added.content
    assert emu.state.session("s3")["status"] == "requires_action"
    page = http.get("/agents/sessions", params={"order": "asc"}).content
    assert page.endswith(b'"first_id":"s1","last_id":"s3","has_more":false}')  # the real ids


@pytest.mark.parametrize(
    "body",
    [
        {"raw": {"id": '1, "object": "x"'}},  # would spill into the next field
        {"raw": {"id": "}"}},
        {"raw": {"id": ""}},
        {"raw": {"id": "NaN"}},
        {"raw": {"id": 5}},
        {"raw": ["id"]},
        {"raw_actions": [{"json": "{}", "turn_id": "t"}]},
        {"raw_actions": [{"json": "{}", "turn_id": "t", "call_id": ""}]},
        {"raw_actions": [{"json": "{", "turn_id": "t", "call_id": "c"}]},
        {"raw_actions": [{"json": "{}", "turn_id": "t", "call_id": "c", "x": 1}]},
    ],
)
def test_admin_refuses_raw_texts_that_are_not_one_json_value(
    emu: EmulatorServer, admin: httpx.Client, body: dict[str, object]
) -> None:
    response = admin.post("/sessions", json=body)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_admin_request"
    assert emu.state.session_ids() == []


def test_python_api_shows_raw_values_as_raw_json() -> None:
    state = EmulatorState()
    session = state.create_session(session_id="s", raw={"metadata": "[]"})

    assert session["metadata"] == RawJson("[]")
    assert session["id"] == "s"
    with pytest.raises(ValueError, match="surrogate"):
        state.create_session(raw={"id": '"\ud800"'})  # a lone surrogate must be an escape
    state.create_session(session_id="t", raw={"id": '"\\ud800"'})
    assert dumps(state.session("t")).startswith('{"id":"\\ud800",')


@pytest.mark.parametrize(
    "text",
    ["0", "-0.5e+10", '"\\u00e9\\ud800"', '"é"', " {} ", '{"a":[1,{"b":null}],"c":true}', DEEP],
)
def test_check_json_text_accepts_any_single_value(text: str) -> None:
    check_json_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "1 2",
        "01",
        "1.",
        "[1,]",
        '{"a":1,}',
        '{"a"}',
        "{1:2}",
        "[",
        "]]",
        '"a',
        "nullx",
        '"\x01"',
        "Infinity",
        "[" * 5000,
        '{"a":1}}',
    ],
)
def test_check_json_text_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="JSON value"):
        check_json_text(text)


def test_a_string_equal_to_a_placeholder_cannot_capture_a_raw_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokens = iter(["0" * 32, "1" * 32])
    monkeypatch.setattr(secrets, "token_hex", lambda _: next(tokens))
    colliding = f"emulator-raw-{'0' * 32}:0"

    text = dumps({"id": colliding, "raw": RawJson("[1]")})

    assert json.loads(text) == {"id": colliding, "raw": [1]}
