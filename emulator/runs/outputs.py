"""Validation of ``POST .../submit_tool_outputs``: all or nothing, as strict as the service.

Checks run in the order an API layer runs them: the body's shape (400), the content fault
(``refuse_text``), then, against the run, its status and the calls answered: every call
of the current phase exactly once, nothing else ("All outputs must be submitted in a
single request"). One bad output rejects the whole request and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from emulator.wire import JSON, WireError

_BODY_KEYS = frozenset({"tool_outputs", "stream"})
_OUTPUT_KEYS = frozenset({"tool_call_id", "output"})


def _bad(message: str, param: str | None, code: str) -> WireError:
    return WireError(400, message, code=code, param=param)


def json_type(value: Any) -> str:
    """The JSON name of a value's type, as the API's messages say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _invalid_type(where: str, expected: str, value: Any) -> WireError:
    return _bad(
        f"Invalid type for '{where}': expected {expected}, but got {json_type(value)} instead.",
        where,
        "invalid_type",
    )


def _missing(where: str) -> WireError:
    return _bad(f"Missing required parameter: '{where}'.", where, "missing_required_parameter")


def _unknown(where: str) -> WireError:
    return _bad(f"Unknown parameter: '{where}'.", where, "unknown_parameter")


def _check_output(item: Any, where: str) -> JSON:
    if not isinstance(item, dict):
        raise _invalid_type(where, "an object", item)
    unknown = sorted(set(item) - _OUTPUT_KEYS)
    if unknown:
        raise _unknown(f"{where}.{unknown[0]}")
    for key in ("tool_call_id", "output"):
        if item.get(key) is None:
            raise _missing(f"{where}.{key}")
        if not isinstance(item[key], str):
            raise _invalid_type(f"{where}.{key}", "a string", item[key])
    if not item["tool_call_id"]:
        raise _bad(
            f"Invalid '{where}.tool_call_id': expected a non-empty string.",
            f"{where}.tool_call_id",
            "invalid_value",
        )
    return item


def check_shape(body: Any) -> list[JSON]:
    """Validate the body alone; returns its tool outputs. ``stream: true`` is refused."""
    if not isinstance(body, dict):
        raise _invalid_type("body", "an object", body)
    unknown = sorted(set(body) - _BODY_KEYS)
    if unknown:
        raise _unknown(unknown[0])
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _invalid_type("stream", "a boolean", stream)
    if stream:
        raise _bad(
            "Streaming is not supported by the emulator: submit with 'stream': false.",
            "stream",
            "unsupported_value",
        )
    outputs = body.get("tool_outputs")
    if outputs is None:
        raise _missing("tool_outputs")
    if not isinstance(outputs, list):
        raise _invalid_type("tool_outputs", "an array", outputs)
    return [_check_output(item, f"tool_outputs[{i}]") for i, item in enumerate(outputs)]


def refuse_content(outputs: Iterable[JSON], text: str | None) -> None:
    """The ``refuse_text`` fault: refuse the first output holding ``text``."""
    if text is None:
        return
    for i, item in enumerate(outputs):
        if text in item["output"]:
            raise _bad(
                f"Invalid 'tool_outputs[{i}].output': the content was refused (emulated).",
                f"tool_outputs[{i}].output",
                "content_refused",
            )


def check_answers(run_id: str, outputs: Sequence[JSON], pending: Sequence[str]) -> None:
    """Every pending call id answered exactly once, and no other: else 400 naming the id."""
    seen: set[str] = set()
    for i, item in enumerate(outputs):
        call_id, where = item["tool_call_id"], f"tool_outputs[{i}].tool_call_id"
        if call_id in seen:
            raise _bad(
                f"Duplicate tool output for tool_call_id '{call_id}' in '{where}': "
                "each call is answered exactly once.",
                where,
                "duplicate_tool_call_id",
            )
        if call_id not in pending:
            raise _bad(
                f"No tool call found with id '{call_id}' in the required action of run '{run_id}'.",
                where,
                "unknown_tool_call_id",
            )
        seen.add(call_id)
    missing = [call_id for call_id in pending if call_id not in seen]
    if missing:
        names = ", ".join(f"'{call_id}'" for call_id in missing)
        raise _bad(
            f"Missing tool outputs for tool_call_id {names}: all outputs of a required action "
            "must be submitted in a single request.",
            "tool_outputs",
            "missing_tool_outputs",
        )
