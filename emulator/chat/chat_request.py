"""A Chat Completions request: validated like the real API, reduced to the model's turn.

Beyond each message's own shape (``emulator.chat.messages``), the order rule: an assistant
message with ``tool_calls`` must be followed, before any other non-tool message and before
the end of the list, by a ``tool`` message for each of its call ids; and a ``tool`` message
must answer a call of the assistant message it follows. The two refusals carry the real
API's texts (its ``param`` spelling ``messages.[i].role`` included, and its "preceeding").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emulator.chat.checks import bad, empty_array, invalid_type, missing, request_body
from emulator.chat.messages import Message, check_message
from emulator.chat.model import Turn
from emulator.chat.tools import check_chat_tools
from emulator.wire import JSON

_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
)
_NOT_A_RESPONSE = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'."
)


@dataclass(frozen=True)
class ChatRequest:
    """A valid request: the model to name in the answer, the turn, the tools declared."""

    model: str
    turn: Turn
    tools: list[JSON]


def _model(body: JSON, deployment: str | None) -> str:
    if deployment is not None:  # Azure: the deployment in the path is the model
        return deployment
    model = body.get("model")
    if model is None:
        raise bad("you must provide a model parameter")
    if not isinstance(model, str):
        raise invalid_type("model", "a string", model)
    return model


def _messages(value: Any) -> list[Message]:
    if value is None:
        raise missing("messages")
    if not isinstance(value, list):
        raise invalid_type("messages", "an array", value)
    if not value:
        raise empty_array("messages")
    return [check_message(message, i) for i, message in enumerate(value)]


def _close(asked_at: int | None, asked: Sequence[str], answered: set[str]) -> None:
    unanswered = [call_id for call_id in asked if call_id not in answered]
    if asked_at is not None and unanswered:
        raise bad(_UNANSWERED + ", ".join(unanswered), f"messages.[{asked_at}].role")


def check_sequence(messages: Sequence[Message]) -> None:
    """Refuse unanswered tool calls and tool messages answering no call they follow."""
    asked_at: int | None = None
    asked: tuple[str, ...] = ()
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id not in asked:
                raise bad(_NOT_A_RESPONSE, f"messages.[{index}].role")
            answered.add(str(message.tool_call_id))
            continue
        _close(asked_at, asked, answered)
        asked_at = index if message.tool_calls else None
        asked, answered = message.tool_calls, set()
    _close(asked_at, asked, answered)


def _turn(messages: Sequence[Message]) -> Turn:
    conversation = next((m.text for m in messages if m.role == "user"), "")
    assistants = [i for i, m in enumerate(messages) if m.role == "assistant"]
    if not assistants:
        return Turn(conversation, 0)
    last = assistants[-1]
    answers: dict[str, str] = {}
    for message in messages[last + 1 :]:
        if message.tool_call_id is not None:
            answers.setdefault(message.tool_call_id, message.text)
    outputs = tuple(answers[c] for c in messages[last].tool_calls if c in answers)
    return Turn(conversation, len(assistants), outputs)


def parse_chat(body: Any, deployment: str | None = None) -> ChatRequest:
    """Validate a ``POST .../chat/completions`` body; 400 ``WireError`` when the API would."""
    request = request_body(body)
    model = _model(request, deployment)
    messages = _messages(request.get("messages"))
    check_sequence(messages)
    tools = check_chat_tools(request.get("tools"))
    return ChatRequest(model, _turn(messages), tools)
