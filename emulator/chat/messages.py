"""One Chat Completions message, checked and reduced to what the model and the rules need.

Roles are ``system``, ``developer``, ``user``, ``assistant`` and ``tool``. Contents are a
string or an array of parts (user: text, image, audio, file; system, developer and tool:
text only; assistant: text or refusal). An assistant message may hold ``tool_calls``
(each ``{"id", "type": "function", "function": {"name", "arguments": "<string>"}}``) and
then needs no content; a tool message needs its ``tool_call_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.chat.checks import (
    PartTexts,
    an_object,
    bad,
    content_text,
    empty_array,
    invalid_type,
    invalid_value,
    missing,
    required_string,
)
from emulator.wire import JSON

ROLES = ("system", "developer", "user", "assistant", "tool")
_USER_PARTS: PartTexts = {"text": "text", "image_url": None, "input_audio": None, "file": None}
_TEXT_PARTS: PartTexts = {"text": "text"}
_ASSISTANT_PARTS: PartTexts = {"text": "text", "refusal": "refusal"}
#: A call's type -> the object holding its name, and that object's other required string.
_CALL_KINDS = {"function": ("function", "arguments"), "custom": ("custom", "input")}


@dataclass(frozen=True)
class Message:
    """A checked message: its role, its text, the calls it makes or the call it answers."""

    role: str
    text: str = ""
    tool_calls: tuple[str, ...] = ()
    tool_call_id: str | None = None


def _tool_call(value: Any, where: str) -> str:
    call = an_object(value, where)
    call_id = required_string(call, "id", where)
    kind = call.get("type")
    if kind is None:
        raise missing(f"{where}.type")
    if kind not in _CALL_KINDS:
        raise invalid_value(f"{where}.type", kind, list(_CALL_KINDS))
    key, other = _CALL_KINDS[kind]
    if call.get(key) is None:
        raise missing(f"{where}.{key}")
    inner = an_object(call[key], f"{where}.{key}")
    required_string(inner, "name", f"{where}.{key}")
    required_string(inner, other, f"{where}.{key}")  # arguments: a string, never an object
    return call_id


def _tool_call_ids(calls: Any, where: str) -> tuple[str, ...]:
    if not isinstance(calls, list):
        raise invalid_type(where, "an array", calls)
    if not calls:
        raise empty_array(where)
    return tuple(_tool_call(call, f"{where}[{i}]") for i, call in enumerate(calls))


def _assistant(message: JSON, where: str) -> Message:
    calls = message.get("tool_calls")
    ids = () if calls is None else _tool_call_ids(calls, f"{where}.tool_calls")
    content = message.get("content")
    if content is None:
        if not ids and message.get("function_call") is None:
            raise bad(
                "Invalid value for 'content': expected a string, got null.", f"{where}.content"
            )
        return Message("assistant", "", ids)
    return Message("assistant", content_text(content, f"{where}.content", _ASSISTANT_PARTS), ids)


def _tool(message: JSON, where: str) -> Message:
    call_id = required_string(message, "tool_call_id", where)
    if message.get("content") is None:
        raise missing(f"{where}.content")
    text = content_text(message["content"], f"{where}.content", _TEXT_PARTS)
    return Message("tool", text, tool_call_id=call_id)


def check_message(value: Any, index: int) -> Message:
    """Check ``messages[index]`` on its own (the order rules are ``check_sequence``'s)."""
    where = f"messages[{index}]"
    message = an_object(value, where)
    role = message.get("role")
    if role is None:
        raise missing(f"{where}.role")
    if role not in ROLES:
        raise invalid_value(f"{where}.role", role, ROLES)
    if role == "assistant":
        return _assistant(message, where)
    if role == "tool":
        return _tool(message, where)
    if message.get("content") is None:
        raise missing(f"{where}.content")
    parts = _USER_PARTS if role == "user" else _TEXT_PARTS
    return Message(role, content_text(message["content"], f"{where}.content", parts))
