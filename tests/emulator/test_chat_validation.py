"""What the model endpoints refuse, in the real API's words, and what they accept.

Each refusal is a 400 with the OpenAI error JSON; each is paired with a correct request
that is accepted, so a check that refused everything would fail here too. Every refused
request is recorded (``refused: true``), so a tool loop's test can prove its client sent
nothing the real API would refuse.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from emulator import EmulatorServer
from emulator.testing import TEST_API_KEY

USER = {"role": "user", "content": "hello"}
CALL_A = {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{}"}}
CALL_B = {"id": "call_b", "type": "function", "function": {"name": "add", "arguments": "{}"}}
ASKING = {"role": "assistant", "content": None, "tool_calls": [CALL_A, CALL_B]}
TOOL_A = {"role": "tool", "tool_call_id": "call_a", "content": "1"}
TOOL_B = {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "2"}]}
UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
)
NOT_A_RESPONSE = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
FC_A = {"type": "function_call", "call_id": "call_a", "name": "add", "arguments": "{}"}
FC_B = {"type": "function_call", "call_id": "call_b", "name": "add", "arguments": "{}"}
OUT_A = {"type": "function_call_output", "call_id": "call_a", "output": "1"}
OUT_B = {
    "type": "function_call_output",
    "call_id": "call_b",
    "output": [{"type": "input_text", "text": "2"}],
}
FLAT_TOOL = {"type": "function", "name": "add", "parameters": {"type": "object"}}
NESTED_TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


@pytest.fixture
def api(emu: EmulatorServer) -> Iterator[httpx.Client]:
    """A raw client on ``/v1`` with a bearer token and no beta header, as the SDK sends."""
    headers = {"Authorization": f"Bearer {TEST_API_KEY}"}
    with httpx.Client(base_url=emu.base_url, headers=headers, timeout=5.0) as client:
        yield client


def _error(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


def _chat(api: httpx.Client, messages: Any, **extra: Any) -> httpx.Response:
    return api.post("/chat/completions", json={"model": "gpt-4o", "messages": messages, **extra})


def _respond(api: httpx.Client, input_items: Any, **extra: Any) -> httpx.Response:
    return api.post("/responses", json={"model": "gpt-4o", "input": input_items, **extra})


# --- chat: the tool-call order -------------------------------------------------------------------


def test_chat_accepts_answered_parallel_calls_in_any_order(
    emu: EmulatorServer, api: httpx.Client
) -> None:
    answer = _chat(api, [USER, ASKING, TOOL_B, TOOL_A])

    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Tool outputs: 1 | 2"
    assert emu.state.chat.calls(refused=True) == []


@pytest.mark.parametrize(
    ("messages", "unanswered", "at"),
    [
        ([USER, ASKING], "call_a, call_b", 1),
        ([USER, ASKING, TOOL_A], "call_b", 1),
        ([USER, ASKING, TOOL_A, USER, {"role": "assistant", "content": "x"}], "call_b", 1),
        (
            [USER, ASKING, TOOL_A, TOOL_B, {"role": "assistant", "tool_calls": [CALL_A]}],
            "call_a",
            4,
        ),
    ],
    ids=["none-answered", "one-answered", "user-message-between", "second-turn"],
)
def test_chat_refuses_unanswered_tool_calls(
    emu: EmulatorServer, api: httpx.Client, messages: list[Any], unanswered: str, at: int
) -> None:
    error = _error(_chat(api, messages))

    assert error["message"] == UNANSWERED + unanswered
    assert error["param"] == f"messages.[{at}].role"
    refused = emu.state.chat.calls(refused=True)
    assert [(c["status"], c["error"]["error"]["message"]) for c in refused] == [
        (400, error["message"])
    ]
    assert refused[0]["request"]["messages"] == messages  # what the client sent, recorded
    assert emu.state.chat.counts() == {}  # the model was not called


@pytest.mark.parametrize(
    ("messages", "at"),
    [
        ([USER, TOOL_A], 1),
        ([USER, {"role": "assistant", "content": "no calls"}, TOOL_A], 2),
        ([USER, ASKING, TOOL_A, TOOL_B, USER, TOOL_A], 5),
        (
            [
                USER,
                ASKING,
                TOOL_A,
                TOOL_B,
                {"role": "tool", "tool_call_id": "call_z", "content": "?"},
            ],
            4,
        ),
    ],
    ids=["no-assistant", "assistant-without-calls", "after-a-user-message", "unknown-id"],
)
def test_chat_refuses_a_tool_message_answering_no_preceding_call(
    api: httpx.Client, messages: list[Any], at: int
) -> None:
    error = _error(_chat(api, messages))

    assert error["message"] == NOT_A_RESPONSE
    assert error["param"] == f"messages.[{at}].role"


@pytest.mark.parametrize(
    ("body", "message", "param", "code"),
    [
        ({"messages": [USER]}, "you must provide a model parameter", None, None),
        (
            {"model": "m"},
            "Missing required parameter: 'messages'.",
            "messages",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "messages": []},
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            "messages",
            "empty_array",
        ),
        (
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
            "Invalid value: 'robot'. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'.",
            "messages[0].role",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": [{"content": "x"}]},
            "Missing required parameter: 'messages[0].role'.",
            "messages[0].role",
            "missing_required_parameter",
        ),
        (
            {
                "model": "m",
                "messages": [USER, ASKING, TOOL_A, {**TOOL_B, "content": {"text": "2"}}],
            },
            "Invalid type for 'messages[3].content': expected one of a string or array of objects, but got an object instead.",
            "messages[3].content",
            "invalid_type",
        ),
        (
            {
                "model": "m",
                "messages": [
                    USER,
                    ASKING,
                    TOOL_A,
                    {**TOOL_B, "content": [{"type": "image_url", "image_url": {}}]},
                ],
            },
            "Invalid value: 'image_url'. Supported values are: 'text'.",
            "messages[3].content[0].type",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": [USER, ASKING, {"role": "tool", "content": "1"}]},
            "Missing required parameter: 'messages[2].tool_call_id'.",
            "messages[2].tool_call_id",
            "missing_required_parameter",
        ),
        (
            {
                "model": "m",
                "messages": [
                    USER,
                    {
                        "role": "assistant",
                        "tool_calls": [{**CALL_A, "function": {"name": "add", "arguments": {}}}],
                    },
                ],
            },
            "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a string, but got an object instead.",
            "messages[1].tool_calls[0].function.arguments",
            "invalid_type",
        ),
        (
            {"model": "m", "messages": [USER, {"role": "assistant"}]},
            "Invalid value for 'content': expected a string, got null.",
            "messages[1].content",
            None,
        ),
        (
            {"model": "m", "messages": [USER], "tools": [FLAT_TOOL]},
            "Missing required parameter: 'tools[0].function'.",
            "tools[0].function",
            "missing_required_parameter",
        ),
        (
            {
                "model": "m",
                "messages": [USER],
                "tools": [{"type": "function", "function": {"name": "get weather"}}],
            },
            "Invalid 'tools[0].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
            "tools[0].function.name",
            "invalid_value",
        ),
        (
            {
                "model": "m",
                "messages": [USER],
                "tools": [{"type": "function", "function": {"name": "x" * 65}}],
            },
            "Invalid 'tools[0].function.name': string too long. Expected a string with maximum length 64, but got a string with length 65 instead.",
            "tools[0].function.name",
            "string_above_max_length",
        ),
        (
            {"model": "m", "messages": [USER], "tools": [{"type": "web_search"}]},
            "Invalid value: 'web_search'. Supported values are: 'function'.",
            "tools[0].type",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": [USER], "stream": True},
            "Streaming is not supported by the emulator: send 'stream': false or leave it out.",
            "stream",
            "unsupported_value",
        ),
    ],
    ids=[
        "no-model",
        "no-messages",
        "empty-messages",
        "bad-role",
        "no-role",
        "tool-content-object",
        "tool-content-image",
        "no-tool-call-id",
        "arguments-object",
        "assistant-empty",
        "flat-tool",
        "tool-name-pattern",
        "tool-name-long",
        "tool-type",
        "stream",
    ],
)
def test_chat_refuses_malformed_requests(
    api: httpx.Client, body: dict[str, Any], message: str, param: str | None, code: str | None
) -> None:
    error = _error(api.post("/chat/completions", json=body))

    assert (error["message"], error["param"], error["code"]) == (message, param, code)


def test_chat_accepts_the_correct_forms_of_what_it_refuses(api: httpx.Client) -> None:
    answered = [USER, ASKING, TOOL_A, TOOL_B]
    good = [
        {
            "model": "m",
            "messages": [{"role": "developer", "content": [{"type": "text", "text": "x"}]}, USER],
        },
        {"model": "m", "messages": answered, "tools": [NESTED_TOOL], "stream": False},
        {"model": "m", "messages": [*answered, {"role": "assistant", "content": "done"}, USER]},
        {
            "model": "m",
            "messages": [USER],
            "tools": [{"type": "function", "function": {"name": "get_weather-2"}}],
        },
    ]
    for body in good:
        assert api.post("/chat/completions", json=body).status_code == 200, body


def test_the_sdk_sees_a_refusal_as_bad_request(emu: EmulatorServer, sdk: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model="m", messages=[USER, ASKING, TOOL_A])  # type: ignore[list-item]

    assert refused.value.param == "messages.[1].role"
    assert refused.value.message.endswith(UNANSWERED + "call_b")
    with pytest.raises(openai.BadRequestError, match="Streaming is not supported"):
        sdk.responses.create(model="m", input="x", stream=True)
    assert [c["endpoint"] for c in emu.state.chat.calls(refused=True)] == [
        "chat.completions",
        "responses",
    ]


def test_an_unparsable_body_is_refused_and_recorded(emu: EmulatorServer, api: httpx.Client) -> None:
    answer = api.post(
        "/responses", content=b"{not json", headers={"Content-Type": "application/json"}
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_json"
    [record] = emu.state.chat.calls(refused=True)
    assert (record["endpoint"], record["request"], record["outcome"]) == (
        "responses",
        None,
        "refused",
    )


# --- responses ---------------------------------------------------------------------------------


def test_responses_accepts_answered_calls_in_the_input(api: httpx.Client) -> None:
    answer = _respond(api, [USER, FC_A, FC_B, OUT_B, OUT_A], tools=[FLAT_TOOL])

    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][0]["content"][0]["text"] == "Tool outputs: 1 | 2"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([USER, OUT_A], "No tool call found for function call output with call_id call_a."),
        (
            [USER, FC_A, OUT_A, OUT_B],
            "No tool call found for function call output with call_id call_b.",
        ),
        ([USER, FC_A, FC_B, OUT_A], "No tool output found for function call call_b."),
        ([USER, FC_A], "No tool output found for function call call_a."),
        ([USER, FC_A, USER], "No tool output found for function call call_a."),
    ],
    ids=[
        "output-without-call",
        "one-unknown-output",
        "one-unanswered",
        "none-answered",
        "user-message-instead",
    ],
)
def test_responses_refuses_mismatched_calls_and_outputs(
    emu: EmulatorServer, api: httpx.Client, items: list[Any], message: str
) -> None:
    error = _error(_respond(api, items))

    assert (error["message"], error["param"]) == (message, "input")
    assert emu.state.chat.calls(refused=True)[0]["request"]["input"] == items


def test_responses_checks_outputs_against_the_previous_response_chain(
    emu: EmulatorServer, api: httpx.Client
) -> None:
    first = _respond(api, "hello").json()  # builtin script: two calls
    call_ids = [o["call_id"] for o in first["output"]]
    outputs = [{"type": "function_call_output", "call_id": c, "output": c} for c in call_ids]

    missing_one = _error(_respond(api, outputs[:1], previous_response_id=first["id"]))
    assert missing_one["message"] == f"No tool output found for function call {call_ids[1]}."
    unknown = _error(_respond(api, [*outputs, OUT_A], previous_response_id=first["id"]))
    assert unknown["message"] == "No tool call found for function call output with call_id call_a."
    skipped = _error(_respond(api, "never mind", previous_response_id=first["id"]))
    assert skipped["message"] == f"No tool output found for function call {call_ids[0]}."
    not_chained = _error(_respond(api, outputs))  # the calls are in no chain the request names
    assert (
        not_chained["message"]
        == f"No tool call found for function call output with call_id {call_ids[0]}."
    )

    answered = _respond(api, outputs, previous_response_id=first["id"])
    assert answered.status_code == 200
    assert (
        answered.json()["output"][0]["content"][0]["text"]
        == f"Tool outputs: {call_ids[0]} | {call_ids[1]}"
    )
    after_text = _respond(api, "thanks", previous_response_id=answered.json()["id"])
    assert after_text.status_code == 200  # the whole chain is answered
    assert len(emu.state.chat.calls(refused=True)) == 4


def test_responses_refuses_an_unknown_previous_response(api: httpx.Client) -> None:
    error = _error(_respond(api, "hi", previous_response_id="resp_nope"))

    assert error == {
        "message": "Previous response with id 'resp_nope' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


def test_a_response_not_stored_cannot_be_chained_or_retrieved(api: httpx.Client) -> None:
    unstored = _respond(api, "hi", store=False).json()
    stored = _respond(api, "hi there").json()

    assert unstored["store"] is False
    assert api.get(f"/responses/{unstored['id']}").status_code == 404
    assert api.get(f"/responses/{stored['id']}").json() == stored
    assert (
        _error(_respond(api, "x", previous_response_id=unstored["id"]))["code"]
        == "previous_response_not_found"
    )
    missing = api.get("/responses/resp_missing")
    assert missing.json()["error"]["message"] == "Response with id 'resp_missing' not found."


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({"input": "x"}, "Missing required parameter: 'model'.", "model"),
        (
            {"model": "m", "input": {"role": "user"}},
            "Invalid type for 'input': expected one of a string or array of input items, but got an object instead.",
            "input",
        ),
        (
            {"model": "m", "input": [{"type": "computer_call"}]},
            "Invalid value: 'computer_call'. Supported values are: 'message', 'function_call', 'function_call_output', 'reasoning', and 'item_reference'.",
            "input[0].type",
        ),
        (
            {"model": "m", "input": [USER, {**FC_A, "arguments": {}}, OUT_A]},
            "Invalid type for 'input[1].arguments': expected a string, but got an object instead.",
            "input[1].arguments",
        ),
        (
            {
                "model": "m",
                "input": [USER, FC_A, {"type": "function_call_output", "call_id": "call_a"}],
            },
            "Missing required parameter: 'input[2].output'.",
            "input[2].output",
        ),
        (
            {
                "model": "m",
                "input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}],
            },
            "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.",
            "input[0].content[0].type",
        ),
        (
            {"model": "m", "input": "x", "tools": [NESTED_TOOL]},
            "Missing required parameter: 'tools[0].name'.",
            "tools[0].name",
        ),
        (
            {"model": "m", "input": "x", "tools": [{"type": "function", "name": "add"}]},
            "Missing required parameter: 'tools[0].parameters'.",
            "tools[0].parameters",
        ),
        (
            {"model": "m", "input": "x", "tools": [{**FLAT_TOOL, "name": "a.b"}]},
            "Invalid 'tools[0].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
            "tools[0].name",
        ),
        (
            {"model": "m", "input": "x", "instructions": ["be brief"]},
            "Invalid type for 'instructions': expected a string, but got an array instead.",
            "instructions",
        ),
    ],
    ids=[
        "no-model",
        "input-object",
        "unsupported-item",
        "arguments-object",
        "output-missing",
        "assistant-input-text",
        "nested-tool",
        "tool-parameters-missing",
        "tool-name-pattern",
        "instructions-array",
    ],
)
def test_responses_refuses_malformed_requests(
    api: httpx.Client, body: dict[str, Any], message: str, param: str
) -> None:
    error = _error(api.post("/responses", json=body))

    assert (error["message"], error["param"]) == (message, param)


def test_responses_accepts_the_correct_forms_of_what_it_refuses(api: httpx.Client) -> None:
    good = [
        {
            "model": "m",
            "input": "x",
            "tools": [FLAT_TOOL, {**FLAT_TOOL, "name": "b", "strict": True, "parameters": None}],
        },
        {
            "model": "m",
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "x"}],
                }
            ],
        },
        {
            "model": "m",
            "input": [
                {"role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
                USER,
            ],
        },
        {"model": "m", "input": [USER, FC_A, OUT_A], "instructions": "be brief", "stream": False},
        {"model": "m"},
    ]
    for body in good:
        assert api.post("/responses", json=body).status_code == 200, body
