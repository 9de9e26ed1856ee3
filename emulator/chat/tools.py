"""Function tool definitions: the nested Chat form and the flat Responses form.

Chat Completions takes ``{"type": "function", "function": {"name", "description",
"parameters", "strict"}}``; Responses takes the same fields flat, ``{"type": "function",
"name", "parameters", "strict"}``. A client that sends one API the other's form is refused
as the real API refuses it (the name is "missing"), which is the point of checking.
"""

from __future__ import annotations

import re
from typing import Any

from emulator.chat.checks import (
    an_object,
    bad,
    invalid_type,
    invalid_value,
    missing,
    optional_bool,
)
from emulator.wire import JSON

NAME_PATTERN = "^[a-zA-Z0-9_-]+$"
MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[a-zA-Z0-9_-]+")


def check_name(value: Any, param: str) -> str:
    """A function name: 1 to 64 letters, digits, ``_`` or ``-``."""
    if value is None:
        raise missing(param)
    if not isinstance(value, str):
        raise invalid_type(param, "a string", value)
    if len(value) > MAX_NAME_LENGTH:
        raise bad(
            f"Invalid '{param}': string too long. Expected a string with maximum length "
            f"{MAX_NAME_LENGTH}, but got a string with length {len(value)} instead.",
            param,
            "string_above_max_length",
        )
    if not _NAME.fullmatch(value):
        raise bad(
            f"Invalid '{param}': string does not match pattern. Expected a string that "
            f"matches the pattern '{NAME_PATTERN}'.",
            param,
            "invalid_value",
        )
    return value


def _listed(tools: Any) -> list[JSON]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array", tools)
    return [an_object(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


def _function_type(tool: JSON, where: str) -> None:
    kind = tool.get("type")
    if kind is None:
        raise missing(f"{where}.type")
    if kind != "function":
        raise invalid_value(f"{where}.type", kind, ["function"])


def _schema(holder: JSON, where: str, *, required: bool) -> None:
    if required and "parameters" not in holder:
        raise missing(f"{where}.parameters")
    parameters = holder.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid_type(f"{where}.parameters", "an object", parameters)
    optional_bool(holder, "strict", False, where)


def check_chat_tools(tools: Any) -> list[JSON]:
    """Validate Chat ``tools`` (nested form); returns them as given."""
    listed = _listed(tools)
    for index, tool in enumerate(listed):
        where = f"tools[{index}]"
        _function_type(tool, where)
        if tool.get("function") is None:
            raise missing(f"{where}.function")
        function = an_object(tool["function"], f"{where}.function")
        check_name(function.get("name"), f"{where}.function.name")
        _schema(function, f"{where}.function", required=False)
    return listed


#: The hosted tools Responses takes beside functions; the scripted model never calls them,
#: but a request naming one (tool search, for deferred functions) is a valid request.
HOSTED_TOOLS = frozenset(
    {
        "tool_search",
        "web_search",
        "web_search_preview",
        "file_search",
        "code_interpreter",
        "image_generation",
        "mcp",
        "custom",
    }
)


def check_response_tools(tools: Any) -> list[JSON]:
    """Validate Responses ``tools`` (flat form); returns them as a response echoes them."""
    listed = _listed(tools)
    echoed: list[JSON] = []
    for index, tool in enumerate(listed):
        where = f"tools[{index}]"
        if tool.get("type") in HOSTED_TOOLS:
            echoed.append(dict(tool))
            continue
        _function_type(tool, where)
        check_name(tool.get("name"), f"{where}.name")
        _schema(tool, where, required=True)
        defaults: JSON = {"description": None, "strict": True}
        echoed.append(defaults | {k: v for k, v in tool.items() if v is not None})
    return echoed
