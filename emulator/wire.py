"""Wire shapes of the Agents API: the JSON the real service sends, built in one place.

Field names and required fields follow the official ``openai`` package (3.51.0,
``openai/types/beta/agent_session.py``), so that its models parse every answer strictly.
Builders return plain dicts because the emulator speaks JSON, not objects.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import Any

JSON = dict[str, Any]
ActionKey = tuple[str, ...]

FUNCTION_CALL = "function_call"
TOOL_RESULT = "agent.session.input.tool_result"
MESSAGE = "agent.session.input.message"
CANCEL = "agent.session.input.cancel"
MCP_RESULT = "agent.session.input.mcp_approval_request_result"
COMPUTER_USE_RESULT = "agent.session.input.computer_use_approval_request_result"

#: Input event type -> the required action type it answers (``None``: answers no action).
INPUT_TYPES: Mapping[str, str | None] = {
    TOOL_RESULT: FUNCTION_CALL,
    MCP_RESULT: "mcp_approval_request",
    COMPUTER_USE_RESULT: "computer_use_approval_request",
    MESSAGE: None,
    CANCEL: None,
}


class WireError(Exception):
    """An answer in the OpenAI error shape; raised anywhere, rendered once by the app."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = dict(headers or {})

    def body(self) -> JSON:
        """The ``{"error": {...}}`` document clients parse."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "code": self.code,
                "param": self.param,
            }
        }


def new_id(prefix: str) -> str:
    """A random id in the API's ``<prefix>_<hex>`` style."""
    return f"{prefix}_{secrets.token_hex(12)}"


def function_call(
    name: str,
    arguments: Any = None,
    *,
    turn_id: str | None = None,
    call_id: str | None = None,
) -> JSON:
    """A ``function_call`` required action; ``arguments`` is a JSON value, not a string."""
    return {
        "type": FUNCTION_CALL,
        "turn_id": turn_id or new_id("turn"),
        "call_id": call_id or new_id("call"),
        "name": name,
        "arguments": {} if arguments is None else arguments,
    }


def mcp_approval_request(
    server_label: str = "docs",
    name: str | None = "search",
    *,
    turn_id: str | None = None,
    request_id: str | None = None,
) -> JSON:
    """An MCP approval request: an action toolfan must leave alone."""
    return {
        "type": "mcp_approval_request",
        "turn_id": turn_id or new_id("turn"),
        "request_id": request_id or new_id("mcpr"),
        "request": {
            "type": "mcp_tool_call",
            "server_label": server_label,
            "name": name,
            "arguments": {},
            "message": f"Allow {server_label} to run {name}?",
        },
    }


def computer_use_approval_request(
    origin: str = "https://example.com",
    *,
    turn_id: str | None = None,
    request_id: str | None = None,
) -> JSON:
    """A browser-origin approval request, another action kind toolfan must not answer."""
    return {
        "type": "computer_use_approval_request",
        "turn_id": turn_id or new_id("turn"),
        "request_id": request_id or new_id("cuar"),
        "request": {"type": "browser_origin_access", "origin": origin, "reason": None},
    }


def environment_connection(environment_id: str | None = None) -> JSON:
    """An ``environment_connection`` action (has no turn)."""
    return {"type": "environment_connection", "environment_id": environment_id or new_id("env")}


def action_key(action: Mapping[str, Any]) -> ActionKey:
    """The identity an answer refers to: (type, turn, call) or (type, request id)."""
    kind = str(action.get("type"))
    if kind == FUNCTION_CALL:
        return (kind, str(action.get("turn_id")), str(action.get("call_id")))
    if "request_id" in action:
        return (kind, str(action["request_id"]))
    if "environment_id" in action:
        return (kind, str(action["environment_id"]))
    return (kind, str(sorted(action.items())))


def function_tool(name: str) -> JSON:
    """A minimal function tool definition as it appears in ``agent.tools``."""
    return {
        "type": "function",
        "name": name,
        "description": f"{name} (emulated)",
        "parameters": {"type": "object", "properties": {}},
        "defer_loading": False,
    }


def agent_json(agent_id: str, tools: Iterable[JSON]) -> JSON:
    """The ``agent`` object of a session, every field the SDK requires present."""
    return {
        "id": agent_id,
        "name": None,
        "instructions": None,
        "model": "gpt-5",
        "multi_agent": {"enabled": False, "max_concurrent_subagents": None},
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "auto",
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tools": list(tools),
    }


def default_tools(actions: Iterable[Mapping[str, Any]]) -> list[JSON]:
    """One function tool per distinct function name the actions call, in first-seen order.

    Malformed calls (no name) are skipped, so tests can seed them to exercise clients.
    """
    names = dict.fromkeys(
        str(a["name"]) for a in actions if a.get("type") == FUNCTION_CALL and "name" in a
    )
    return [function_tool(name) for name in names]
