"""The emulator rejects what the real service would, with the OpenAI error JSON."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from emulator import EmulatorServer, function_call, mcp_approval_request, running_emulator
from tests.emulator.conftest import RESULT


@pytest.fixture
def session_id(emu: EmulatorServer) -> str:
    actions = [
        function_call("add", {"a": 1}, turn_id="t1", call_id="c1"),
        function_call("add", {"a": 2}, turn_id="t1", call_id="c2"),
        mcp_approval_request(request_id="mcp_1"),
    ]
    return str(emu.state.create_session(actions)["id"])


def _post(http: httpx.Client, session_id: str, body: Any, key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return http.post(f"/agents/sessions/{session_id}/events", json=body, headers=headers)


def _error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "code", "param"}
    assert body["error"]["message"]
    return dict(body["error"])


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in RESULT.items() if k != key}


@pytest.mark.parametrize(
    ("event", "param"),
    [
        (_without("call_id"), "events[0].call_id"),
        (_without("turn_id"), "events[0].turn_id"),
        (_without("success"), "events[0].success"),
        ({**RESULT, "success": "yes"}, "events[0].success"),
        ({**RESULT, "call_id": 7}, "events[0].call_id"),
        (_without("output"), "events[0].output"),
        ({**RESULT, "error": "also failed"}, "events[0].error"),
        ({**_without("output"), "success": False}, "events[0].error"),
        ({**RESULT, "output": [{"type": "input_text"}]}, "events[0].output[0].text"),
        ({**RESULT, "output": [{"type": "video", "url": "x"}]}, "events[0].output[0].type"),
        ({**RESULT, "output": {"json": "object"}}, "events[0].output"),
        ({**RESULT, "extra": 1}, "events[0].extra"),
        ({**RESULT, "type": "agent.session.input.nonsense"}, "events[0].type"),
        ("not an object", "events[0]"),
    ],
)
def test_malformed_tool_results_are_400(
    http: httpx.Client, session_id: str, event: Any, param: str, emu: EmulatorServer
) -> None:
    response = _post(http, session_id, {"events": [event]})

    assert response.status_code == 400
    assert _error(response)["param"] == param
    assert emu.state.batches() == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"events": []}, "events"),
        ({}, "events"),
        ([RESULT], "body"),
        ({"events": [RESULT], "x": 1}, "x"),
    ],
)
def test_malformed_bodies_are_400(
    http: httpx.Client, session_id: str, body: Any, param: str
) -> None:
    response = _post(http, session_id, body)

    assert response.status_code == 400
    assert _error(response)["param"] == param


def test_invalid_json_is_400(http: httpx.Client, session_id: str) -> None:
    response = http.post(f"/agents/sessions/{session_id}/events", content=b"{nope")

    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_json"


def test_repeated_call_in_one_batch_is_400(http: httpx.Client, session_id: str) -> None:
    response = _post(http, session_id, {"events": [RESULT, {**RESULT, "output": "4"}]})

    assert response.status_code == 400
    assert _error(response) | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "code": "duplicate_input",
        "param": "events[1]",
    }


@pytest.mark.parametrize(
    "event",
    [
        {**RESULT, "call_id": "never_requested"},
        {**RESULT, "turn_id": "other_turn"},
        {
            "type": "agent.session.input.mcp_approval_request_result",
            "request_id": "mcp_unknown",
            "response": {"type": "mcp_tool_call", "decision": "approve"},
        },
    ],
)
def test_answer_for_a_call_not_pending_is_409(
    http: httpx.Client, session_id: str, event: dict[str, Any]
) -> None:
    response = _post(http, session_id, {"events": [event]})

    assert response.status_code == 409
    assert _error(response)["code"] == "action_not_pending"


def test_second_answer_for_an_answered_call_is_409(
    http: httpx.Client, session_id: str, emu: EmulatorServer
) -> None:
    assert _post(http, session_id, {"events": [RESULT]}).status_code == 202

    again = _post(http, session_id, {"events": [{**RESULT, "output": "other"}]})

    assert again.status_code == 409
    assert len(emu.state.batches()) == 1


def test_one_bad_event_rejects_the_whole_batch(
    http: httpx.Client, session_id: str, emu: EmulatorServer
) -> None:
    bad = {**RESULT, "call_id": "c2", "success": 1}

    response = _post(http, session_id, {"events": [RESULT, bad]})

    assert response.status_code == 400
    assert len(emu.state.session(session_id)["required_actions"]) == 3


def test_accepted_results_remove_only_the_answered_calls(
    http: httpx.Client, session_id: str, emu: EmulatorServer
) -> None:
    failed = {**_without("output"), "call_id": "c2", "success": False, "error": "no such customer"}
    content = {**RESULT, "output": [{"type": "input_text", "text": "3"}]}

    response = _post(http, session_id, {"events": [content, failed]})

    assert response.status_code == 202
    assert response.content == b""
    session = emu.state.session(session_id)
    assert [a["type"] for a in session["required_actions"]] == ["mcp_approval_request"]
    assert session["status"] == "requires_action"


def test_idempotent_replay_is_202_and_changes_nothing(
    http: httpx.Client, session_id: str, emu: EmulatorServer
) -> None:
    assert _post(http, session_id, {"events": [RESULT]}, key="k1").status_code == 202
    emu.state.add_actions(session_id, [function_call("add", turn_id="t1", call_id="c1")])

    replay = _post(http, session_id, {"events": [RESULT]}, key="k1")

    assert replay.status_code == 202
    assert len(emu.state.batches()) == 1
    assert any(a.get("call_id") == "c1" for a in emu.state.session(session_id)["required_actions"])
    assert [r.outcome for r in emu.state.requests(method="POST")] == ["accepted", "replayed"]


def test_same_key_with_another_body_is_409(http: httpx.Client, session_id: str) -> None:
    assert _post(http, session_id, {"events": [RESULT]}, key="k1").status_code == 202

    other = _post(http, session_id, {"events": [{**RESULT, "call_id": "c2"}]}, key="k1")

    assert other.status_code == 409
    assert _error(other)["code"] == "idempotency_key_reused"


def test_messages_and_approvals_are_accepted_and_cancel_clears(
    http: httpx.Client, session_id: str, emu: EmulatorServer
) -> None:
    message = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    }
    approval = {
        "type": "agent.session.input.mcp_approval_request_result",
        "request_id": "mcp_1",
        "response": {"type": "mcp_tool_call", "decision": "deny"},
    }

    assert _post(http, session_id, {"events": [message, approval]}).status_code == 202
    assert len(emu.state.session(session_id)["required_actions"]) == 2
    cancel = {"type": "agent.session.input.cancel"}
    assert _post(http, session_id, {"events": [cancel]}).status_code == 202

    assert emu.state.session(session_id)["required_actions"] == []
    assert emu.state.session(session_id)["status"] == "idle"
    assert len(emu.state.batches(session_id)) == 2


def test_results_for_a_failed_session_are_409(http: httpx.Client, emu: EmulatorServer) -> None:
    session_id = emu.state.create_session(status="failed")["id"]

    response = _post(http, session_id, {"events": [RESULT]})

    assert response.status_code == 409
    assert emu.state.session(session_id)["error"]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("order=newest", "order"),
        ("after=sess_unknown", "after"),
    ],
)
def test_bad_list_queries_are_400(http: httpx.Client, query: str, param: str) -> None:
    response = http.get(f"/agents/sessions?{query}")

    assert response.status_code == 400
    assert _error(response)["param"] == param


def test_list_page_shape_and_default_limit(http: httpx.Client, emu: EmulatorServer) -> None:
    ids = [emu.state.create_session()["id"] for _ in range(25)]

    page = http.get("/agents/sessions").json()

    assert page["object"] == "list"
    assert len(page["data"]) == 20
    assert page["has_more"] is True
    assert (page["first_id"], page["last_id"]) == (ids[-1], ids[5])
    rest = http.get("/agents/sessions", params={"after": page["last_id"]}).json()
    assert [s["id"] for s in rest["data"]] == ids[4::-1]
    assert rest["has_more"] is False


def test_unknown_session_and_url_are_404_json(http: httpx.Client) -> None:
    for path in ("/agents/sessions/sess_missing", "/agents/nothing-here"):
        response = http.get(path)
        assert response.status_code == 404
        assert _error(response)["type"] == "invalid_request_error"
    assert _post(http, "sess_missing", {"events": [RESULT]}).status_code == 404


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer"}, {"Authorization": "Basic dXNlcjpwYXNz"}],
)
def test_missing_bearer_token_is_401(emu: EmulatorServer, headers: dict[str, str]) -> None:
    response = httpx.get(
        f"{emu.base_url}/agents/sessions", headers={"OpenAI-Beta": "agents=v1", **headers}
    )

    assert response.status_code == 401
    assert "API key" in _error(response)["message"]


def test_configured_key_refuses_others_and_is_never_recorded() -> None:
    with running_emulator(api_key="sk-right") as emu:
        url = f"{emu.base_url}/agents/sessions"
        wrong = httpx.get(
            url, headers={"Authorization": "Bearer sk-wrong", "OpenAI-Beta": "agents=v1"}
        )
        right = httpx.get(
            url, headers={"Authorization": "Bearer sk-right", "OpenAI-Beta": "agents=v1"}
        )

        assert wrong.status_code == 401
        assert _error(wrong)["code"] == "invalid_api_key"
        assert right.status_code == 200
        recorded = str([r.to_json() for r in emu.state.requests()])
        assert "sk-right" not in recorded
        assert "sk-wrong" not in recorded


def test_missing_beta_header_is_400(emu: EmulatorServer) -> None:
    response = httpx.get(f"{emu.base_url}/agents/sessions", headers={"Authorization": "Bearer t"})

    assert response.status_code == 400
    assert _error(response)["param"] == "OpenAI-Beta"
