"""Reading the model's tool calls as the application holds them, and writing the answers.

Chat Completions hands ``message.tool_calls``; Responses hands ``response.output``, whose
``function_call`` items are the calls. Applications hold them as the official SDK's
objects or as plain dicts (from JSON, from a store), so both are read alike, by name. The
model wrote them, so nothing is trusted: a call whose function cannot be told, or that is
not a function call, is still answered (with an error the model can act on), and only a
call without an id, which no answer can name, is refused at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dispatcher.sources.outputs import output_text
from handlers import jsonsafe
from handlers.limits import Limits


class Api(StrEnum):
    """The protocol a batch of inline calls came from; it shapes the answers."""

    CHAT = "chat"
    RESPONSES = "responses"


@dataclass(frozen=True)
class InlineCall:
    """One tool call of the model, ready to run.

    Attributes:
        call_id: The id its answer names (``tool_call_id``, ``call_id``).
        name: The function it calls ("" when the call names none).
        arguments: The arguments as the model wrote them (a JSON string, normally).
        problem: Why its arguments are refused unread (too large, too deep): it travels
            without them, and its worker answers with this.
        refusal: Why it is no function call the fleet can run (it names no function, or
            is another kind of tool call): answered with this, and never sent.
    """

    call_id: str
    name: str
    arguments: Any
    problem: str | None = None
    refusal: str | None = None


def _field(value: Any, name: str) -> Any:
    """``value.name`` or ``value[name]``: SDK objects and dicts alike."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _id(value: Any, where: str, key: str) -> str:
    found = _field(value, key)
    if not isinstance(found, str) or not found:
        raise ValueError(f"{where} has no {key!r} (a non-empty string), so no answer can name it")
    return found


def chat_calls(tool_calls: Iterable[Any], limits: Limits) -> list[InlineCall]:
    """The calls of ``message.tool_calls``.

    Raises:
        ValueError: a call has no id.
    """
    calls = []
    for index, raw in enumerate(_listed(tool_calls, "tool_calls")):
        call_id = _id(raw, f"tool_calls[{index}]", "id")
        kind = _field(raw, "type") or "function"
        function = _field(raw, "function")
        if kind != "function" or function is None:
            calls.append(_not_function(call_id, raw, kind))
            continue
        calls.append(
            _call(call_id, _field(function, "name"), _field(function, "arguments"), limits)
        )
    return calls


def function_calls(items: Iterable[Any], limits: Limits) -> list[InlineCall]:
    """The ``function_call`` items of ``response.output``; every other item is left out.

    Raises:
        ValueError: a function call has no ``call_id``.
    """
    calls = []
    for index, raw in enumerate(_listed(items, "output")):
        if _field(raw, "type") != "function_call":
            continue
        call_id = _id(raw, f"output[{index}]", "call_id")
        calls.append(_call(call_id, _field(raw, "name"), _field(raw, "arguments"), limits))
    return calls


def _listed(values: Iterable[Any], what: str) -> list[Any]:
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of calls, not {type(values).__name__}")
    return list(values)


def _call(call_id: str, name: Any, arguments: Any, limits: Limits) -> InlineCall:
    if not isinstance(name, str) or not name:
        return InlineCall(call_id, "", None, refusal="The tool call names no function.")
    if arguments is None:
        arguments = "{}"
    problem = _size_problem(arguments, limits)
    if problem is not None:
        return InlineCall(call_id, name, None, problem)
    return InlineCall(call_id, name, arguments)


def _size_problem(arguments: Any, limits: Limits) -> str | None:
    """Why arguments are refused unread (too large, too deep), as a poller refuses them."""
    if isinstance(arguments, str):
        size = len(arguments.encode("utf-8", "surrogatepass"))
        if size > limits.argument_bytes:
            return f"{size:,} bytes (at most {limits.argument_bytes:,})"
        return None
    return jsonsafe.check(arguments, max_depth=limits.depth, max_bytes=limits.argument_bytes)


def _not_function(call_id: str, raw: Any, kind: Any) -> InlineCall:
    custom = _field(raw, "custom")
    name = _field(custom, "name") if custom is not None else None
    shown = kind if isinstance(kind, str) else type(kind).__name__
    return InlineCall(
        call_id,
        name if isinstance(name, str) else "",
        None,
        refusal=f"Only function tool calls can run here, not {shown[:40]!r} ones.",
    )


def tool_messages(
    calls: Sequence[InlineCall], results: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The ``role: "tool"`` messages answering ``calls``, in their order."""
    return [
        {"role": "tool", "tool_call_id": c.call_id, "content": output_text(results[c.call_id])}
        for c in calls
    ]


def function_outputs(
    calls: Sequence[InlineCall], results: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The ``function_call_output`` items answering ``calls``, in their order."""
    return [
        {
            "type": "function_call_output",
            "call_id": c.call_id,
            "output": output_text(results[c.call_id]),
        }
        for c in calls
    ]
