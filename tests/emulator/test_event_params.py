"""Every error about one event names it: ``param`` starts with ``events[<its index>]``.

toolfan isolates one bad result in a batch by that index, so it must hold for every check,
wherever the bad event sits in the batch.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from emulator import EmulatorServer, function_call, mcp_approval_request
from tests.emulator.conftest import RESULT

MESSAGE = {
    "type": "agent.session.input.message",
    "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
}
APPROVAL = {
    "type": "agent.session.input.mcp_approval_request_result",
    "request_id": "mcp_1",
    "response": {"type": "mcp_tool_call", "decision": "approve"},
}
GOOD = [{**RESULT, "call_id": "c1"}, {**RESULT, "call_id": "c2"}]


def _message(**changes: Any) -> dict[str, Any]:
    return {**MESSAGE, **changes}


def _content(part: Any) -> dict[str, Any]:
    return _message(input=[{"role": "user", "content": [part]}])


BAD_EVENTS = [
    (
        {**RESULT, "call_id": "c3", "output": [{"type": "input_text", "text": ""}]},
        ".output[0].text",
    ),
    ({**RESULT, "call_id": "c3", "output": []}, ".output"),
    ({**RESULT, "call_id": "c3", "output": [{"type": "input_image"}]}, ".output[0].image_url"),
    ({**RESULT, "call_id": "c3", "output": ["text"]}, ".output[0].type"),
    ({**RESULT, "call_id": ""}, ".call_id"),
    ({**RESULT, "turn_id": None}, ".turn_id"),
    ({**RESULT, "call_id": "c3", "success": None}, ".success"),
    ({**RESULT, "call_id": "c3", "success": False, "output": None, "error": ""}, ".error"),
    ({**RESULT, "call_id": "c3", "bogus": 1}, ".bogus"),
    ({"type": 5}, ".type"),
    ([RESULT], ""),
    (_message(input=[]), ".input"),
    (_message(input=[{"role": "assistant", "content": "x"}]), ".input[0].role"),
    (_content({"type": "input_text", "text": ""}), ".input[0].content[0].text"),
    (_content({"type": "audio"}), ".input[0].content[0].type"),
    ({**APPROVAL, "request_id": 1}, ".request_id"),
    ({**APPROVAL, "response": "yes"}, ".response"),
    ({**APPROVAL, "response": {"decision": "maybe"}}, ".response.decision"),
    ({"type": "agent.session.input.cancel", "reason": "x"}, ".reason"),
    ({**RESULT, "call_id": "c1"}, ""),  # a second answer for c1 in the same batch
]


@pytest.fixture
def session_id(emu: EmulatorServer) -> str:
    actions = [
        function_call("add", turn_id="t1", call_id="c1"),
        function_call("add", turn_id="t1", call_id="c2"),
        function_call("add", turn_id="t1", call_id="c3"),
        mcp_approval_request(request_id="mcp_1"),
    ]
    return str(emu.state.create_session(actions)["id"])


@pytest.mark.parametrize(("event", "suffix"), BAD_EVENTS)
def test_a_bad_event_is_named_by_its_index(
    http: httpx.Client, emu: EmulatorServer, session_id: str, event: Any, suffix: str
) -> None:
    response = http.post(f"/agents/sessions/{session_id}/events", json={"events": [*GOOD, event]})

    assert response.status_code == 400
    assert response.json()["error"]["param"] == f"events[2]{suffix}"
    assert emu.state.batches() == []


def test_an_answer_not_pending_is_named_by_its_index(http: httpx.Client, session_id: str) -> None:
    late = {**RESULT, "call_id": "c_never"}

    response = http.post(f"/agents/sessions/{session_id}/events", json={"events": [*GOOD, late]})

    assert response.status_code == 409
    assert response.json()["error"]["param"] == "events[2]"


def test_refuse_text_refuses_the_batch_naming_the_event_that_holds_it(emu, http):
    sid = emu.state.create_session(
        [function_call("add", {}, turn_id="t", call_id=c) for c in ("a", "b")]
    )["id"]
    emu.state.set_faults(refuse_text="forbidden")
    events = [
        {"type": RESULT["type"], "turn_id": "t", "call_id": "a", "success": True, "output": "ok"},
        {
            "type": RESULT["type"],
            "turn_id": "t",
            "call_id": "b",
            "success": True,
            "output": [{"type": "input_text", "text": "a forbidden word"}],
        },
    ]
    refused = http.post(f"/agents/sessions/{sid}/events", json={"events": events})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "events[1].output"
    assert emu.state.batches() == []
    events[1]["output"] = "fine"
    assert http.post(f"/agents/sessions/{sid}/events", json={"events": events}).status_code == 202
