"""One Responses input item, checked and reduced to what the model and the rules need.

Items are messages (``{"role", "content"}``, ``type`` optional), ``function_call`` items
(``call_id``, ``name`` and ``arguments`` a string) and ``function_call_output`` items
(``call_id``, ``output`` a string or input parts), plus ``reasoning`` and
``item_reference``, accepted as they are. A model turn shows as consecutive items the model
wrote: function calls, assistant messages, reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.chat.checks import (
    PartTexts,
    an_object,
    content_text,
    invalid_value,
    missing,
    required_string,
)

ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning", "item_reference")
MESSAGE_ROLES = ("user", "assistant", "system", "developer")
_INPUT_PARTS: PartTexts = {"input_text": "text", "input_image": None, "input_file": None}
_OUTPUT_PARTS: PartTexts = {"output_text": "text", "refusal": "refusal"}
_BY_MODEL = frozenset({"function_call", "reasoning"})


@dataclass(frozen=True)
class Item:
    """A checked item: its type, a message's role, its text, the call it makes or answers."""

    kind: str
    role: str | None = None
    text: str = ""
    call_id: str | None = None

    @property
    def by_model(self) -> bool:
        """Whether the model wrote this item (it belongs to a model turn)."""
        return self.kind in _BY_MODEL or (self.kind == "message" and self.role == "assistant")


def _message(item: dict[str, Any], where: str) -> Item:
    role = item.get("role")
    if role is None:
        raise missing(f"{where}.role")
    if role not in MESSAGE_ROLES:
        raise invalid_value(f"{where}.role", role, MESSAGE_ROLES)
    if item.get("content") is None:
        raise missing(f"{where}.content")
    parts = _OUTPUT_PARTS if role == "assistant" else _INPUT_PARTS
    return Item("message", role, content_text(item["content"], f"{where}.content", parts))


def _function_call(item: dict[str, Any], where: str) -> Item:
    call_id = required_string(item, "call_id", where)
    required_string(item, "name", where)
    required_string(item, "arguments", where)  # a string, never an object
    return Item("function_call", call_id=call_id)


def _function_call_output(item: dict[str, Any], where: str) -> Item:
    call_id = required_string(item, "call_id", where)
    if item.get("output") is None:
        raise missing(f"{where}.output")
    text = content_text(item["output"], f"{where}.output", _INPUT_PARTS)
    return Item("function_call_output", text=text, call_id=call_id)


def check_item(value: Any, index: int) -> Item:
    """Check ``input[index]`` on its own (the call rules are ``responses_request``'s)."""
    where = f"input[{index}]"
    item = an_object(value, where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind is None:
        raise missing(f"{where}.type")
    if kind not in ITEM_TYPES:
        raise invalid_value(f"{where}.type", kind, ITEM_TYPES)
    if kind == "message":
        return _message(item, where)
    if kind == "function_call":
        return _function_call(item, where)
    if kind == "function_call_output":
        return _function_call_output(item, where)
    return Item(kind)
