"""Request validation, as strict as the real service: a client bug must fail here, not later.

Checks run in the order a real API layer runs them: the shape of every event first (400),
then duplicates inside the batch (400), then the session's state (409). A batch is all or
nothing: one bad event rejects the whole request and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emulator.wire import (
    CANCEL,
    COMPUTER_USE_RESULT,
    FUNCTION_CALL,
    INPUT_TYPES,
    JSON,
    MCP_RESULT,
    MESSAGE,
    TOOL_RESULT,
    ActionKey,
    WireError,
)

_CONTENT_FIELDS = {"input_text": "text", "input_image": "image_url"}
_ALLOWED_KEYS = {
    TOOL_RESULT: {"type", "turn_id", "call_id", "success", "output", "error"},
    MCP_RESULT: {"type", "request_id", "response"},
    COMPUTER_USE_RESULT: {"type", "request_id", "response"},
    MESSAGE: {"type", "input"},
    CANCEL: {"type"},
}


def _bad(message: str, param: str, code: str = "invalid_value") -> WireError:
    return WireError(400, message, code=code, param=param)


def _require_str(event: Mapping[str, Any], key: str, where: str) -> None:
    value = event.get(key)
    if key not in event or value is None:
        raise _bad(
            f"Missing required parameter: '{where}.{key}'.",
            f"{where}.{key}",
            "missing_required_parameter",
        )
    if not isinstance(value, str) or not value:
        raise _bad(
            f"Invalid type for '{where}.{key}': expected a non-empty string.",
            f"{where}.{key}",
            "invalid_type",
        )


def _check_content(parts: Any, param: str) -> None:
    if not isinstance(parts, list) or not parts:
        raise _bad(
            f"Invalid '{param}': expected a string or a non-empty array of content parts.",
            param,
            "invalid_type",
        )
    for j, part in enumerate(parts):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _CONTENT_FIELDS:
            raise _bad(
                f"Invalid '{where}.type': expected one of {sorted(_CONTENT_FIELDS)}.",
                f"{where}.type",
            )
        _require_str(part, _CONTENT_FIELDS[kind], where)


def _check_tool_result(event: Mapping[str, Any], where: str) -> None:
    _require_str(event, "turn_id", where)
    _require_str(event, "call_id", where)
    if not isinstance(event.get("success"), bool):
        code = "missing_required_parameter" if "success" not in event else "invalid_type"
        raise _bad(
            f"Invalid or missing '{where}.success': expected a boolean.", f"{where}.success", code
        )
    output, error = event.get("output"), event.get("error")
    if output is not None and error is not None:
        raise _bad(
            f"'{where}' has both 'output' and 'error'; send exactly one.",
            f"{where}.error",
            "invalid_parameter_combination",
        )
    if event["success"]:
        if output is None:
            raise _bad(
                f"Missing required parameter: '{where}.output' (success is true).",
                f"{where}.output",
                "missing_required_parameter",
            )
        if not isinstance(output, str):
            _check_content(output, f"{where}.output")
    else:
        _require_str(event, "error", where)


def _check_approval(event: Mapping[str, Any], where: str) -> None:
    _require_str(event, "request_id", where)
    if not isinstance(event.get("response"), dict):
        raise _bad(
            f"Invalid or missing '{where}.response': expected an object.",
            f"{where}.response",
            "invalid_type",
        )
    if event["type"] == MCP_RESULT and event["response"].get("decision") not in {
        "approve",
        "deny",
        "cancel",
    }:
        raise _bad(f"Invalid '{where}.response.decision'.", f"{where}.response.decision")


def _check_message(event: Mapping[str, Any], where: str) -> None:
    messages = event.get("input")
    if not isinstance(messages, list) or not messages:
        raise _bad(
            f"Invalid '{where}.input': expected a non-empty array of messages.",
            f"{where}.input",
            "invalid_type",
        )
    for j, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            raise _bad(
                f"Invalid '{where}.input[{j}].role': expected 'user'.", f"{where}.input[{j}].role"
            )
        _check_content(message.get("content"), f"{where}.input[{j}].content")


_CHECKS: Mapping[str, Callable[[Mapping[str, Any], str], None]] = {
    TOOL_RESULT: _check_tool_result,
    MCP_RESULT: _check_approval,
    COMPUTER_USE_RESULT: _check_approval,
    MESSAGE: _check_message,
    CANCEL: lambda event, where: None,
}


def answered_key(event: Mapping[str, Any]) -> ActionKey | None:
    """The required action an (already validated) event answers, if any."""
    action_type = INPUT_TYPES.get(str(event.get("type")))
    if action_type is None:
        return None
    if action_type == FUNCTION_CALL:
        return (action_type, str(event["turn_id"]), str(event["call_id"]))
    return (action_type, str(event["request_id"]))


def _check_event(event: Any, where: str) -> JSON:
    if not isinstance(event, dict):
        raise _bad(f"Invalid type for '{where}': expected an object.", where, "invalid_type")
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in _CHECKS:
        raise _bad(
            f"Invalid value for '{where}.type': expected one of {sorted(_CHECKS)}.", f"{where}.type"
        )
    unknown = sorted(set(event) - _ALLOWED_KEYS[kind])
    if unknown:
        raise _bad(
            f"Unknown parameter: '{where}.{unknown[0]}'.",
            f"{where}.{unknown[0]}",
            "unknown_parameter",
        )
    _CHECKS[kind](event, where)
    return event


def check_shape(body: Any) -> list[JSON]:
    """Validate the request body alone; returns its events."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", "body", "invalid_type")
    unknown = sorted(set(body) - {"events"})
    if unknown:
        raise _bad(f"Unknown parameter: '{unknown[0]}'.", unknown[0], "unknown_parameter")
    events = body.get("events")
    if not isinstance(events, list) or not events:
        raise _bad("'events' must be a non-empty array of input events.", "events", "invalid_type")
    checked = [_check_event(event, f"events[{i}]") for i, event in enumerate(events)]
    seen: set[ActionKey] = set()
    for i, event in enumerate(checked):
        key = answered_key(event)
        if key is not None and key in seen:
            raise _bad(
                f"Duplicate answer in 'events[{i}]' for {_describe(key)} in the same request.",
                f"events[{i}]",
                "duplicate_input",
            )
        if key is not None:
            seen.add(key)
    return checked


def refuse_content(events: Iterable[JSON], text: str | None) -> None:
    """The ``refuse_text`` fault: refuse the first tool result holding ``text``."""
    if text is None:
        return
    for i, event in enumerate(events):
        if event.get("type") != TOOL_RESULT:
            continue
        field = "output" if event["success"] else "error"
        value = event.get(field)
        parts = [value] if isinstance(value, str) else [p.get("text") for p in value or []]
        if any(isinstance(p, str) and text in p for p in parts):
            raise _bad(
                f"Invalid '{f'events[{i}].{field}'}': the content was refused (emulated).",
                f"events[{i}].{field}",
                "content_refused",
            )


def check_pending(session_id: str, events: Iterable[JSON], pending: set[ActionKey]) -> None:
    """Reject answers to actions the session is not waiting for (answered, or never asked)."""
    for i, event in enumerate(events):
        key = answered_key(event)
        if key is not None and key not in pending:
            raise WireError(
                409,
                f"Session '{session_id}' has no pending {_describe(key)}: it was never requested "
                "or has already been answered.",
                code="action_not_pending",
                param=f"events[{i}]",
            )


def _describe(key: ActionKey) -> str:
    if key[0] == FUNCTION_CALL:
        return f"function call (turn_id '{key[1]}', call_id '{key[2]}')"
    return f"{key[0]} '{key[1]}'"


@dataclass(frozen=True)
class ListQuery:
    """The parsed query of ``GET /agents/sessions``."""

    limit: int = 20
    after: str | None = None
    order: str = "desc"
    agent_id: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


def _limit(raw: str | None) -> int:
    if raw is None:
        return 20
    try:
        limit = int(raw)
    except ValueError:
        raise _bad(
            f"Invalid 'limit': expected an integer, got '{raw}'.", "limit", "invalid_type"
        ) from None
    if not 1 <= limit <= 100:
        raise _bad(f"Invalid 'limit': must be between 1 and 100, got {limit}.", "limit")
    return limit


def parse_list_query(items: Sequence[tuple[str, str]]) -> ListQuery:
    """Parse ``limit``, ``after``, ``order``, ``agent_id`` and ``metadata[key]=value``."""
    plain = {k: v for k, v in items if not k.startswith("metadata[")}
    metadata = {
        k[len("metadata[") : -1]: v
        for k, v in items
        if k.startswith("metadata[") and k.endswith("]")
    }
    if len(metadata) > 16 or any(
        not 1 <= len(k) <= 64 or len(v) > 512 for k, v in metadata.items()
    ):
        raise _bad(
            "Invalid 'metadata': up to 16 pairs, keys 1-64 and values up to 512 characters.",
            "metadata",
        )
    order = plain.get("order", "desc")
    if order not in {"asc", "desc"}:
        raise _bad(f"Invalid 'order': expected 'asc' or 'desc', got '{order}'.", "order")
    return ListQuery(
        limit=_limit(plain.get("limit")),
        after=plain.get("after") or None,
        order=order,
        agent_id=plain.get("agent_id") or None,
        metadata=metadata,
    )
