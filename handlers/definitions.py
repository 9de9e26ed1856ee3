"""The registered tools as each OpenAI API wants them declared.

One registry, four shapes (see WIRE.md §1 and §3, and the SDK's ``FunctionToolParam``
types): the Agents API takes the flat form with our cleaned schema, as ``agent.tools``
always had; Responses takes the flat form with ``strict: true``; Chat Completions and the
Assistants API nest the function under ``function``. The strict forms use
:func:`handlers.schema.strict_parameters_schema`, so a model sends every property and says
"the default" with ``null``.

Only the Agents and Responses APIs know deferred loading: there a deferred tool keeps
``defer_loading: true`` and the list ends with ``{"type": "tool_search"}``. Chat and
Assistants have no tool search, so a deferred tool is declared like any other.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from handlers.registry import Registry
from handlers.registry import registry as default_registry
from handlers.schema import strict_parameters_schema
from handlers.tool import Tool


class Api(StrEnum):
    """The APIs whose tool definitions :func:`tool_definitions` writes."""

    AGENTS = "agents"
    RESPONSES = "responses"
    CHAT = "chat"
    ASSISTANTS = "assistants"


def tool_definitions(
    api: Api | str = Api.AGENTS, registry: Registry = default_registry
) -> list[dict[str, Any]]:
    """Every registered tool's definition for ``api``, in name order.

    Raises:
        ValueError: ``api`` names no API of :class:`Api`.
    """
    form = _api(api)
    if form is Api.AGENTS:
        return registry.agent_tools()
    tools = [tool for name in registry.names() if (tool := registry.get(name)) is not None]
    if form is Api.RESPONSES:
        definitions = [responses_definition(tool) for tool in tools]
        if any(tool.defer_loading for tool in tools):
            definitions.append({"type": "tool_search"})
        return definitions
    return [nested_definition(tool) for tool in tools]


def responses_definition(tool: Tool[Any, Any]) -> dict[str, Any]:
    """The Responses API's flat, strict function tool (``defer_loading`` only when set)."""
    definition: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": strict_parameters_schema(tool.args.model),
        "strict": True,
    }
    if tool.defer_loading:
        definition["defer_loading"] = True
    return definition


def nested_definition(tool: Tool[Any, Any]) -> dict[str, Any]:
    """The Chat Completions and Assistants function tool: the function nested, strict."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": strict_parameters_schema(tool.args.model),
            "strict": True,
        },
    }


def _api(api: Api | str) -> Api:
    try:
        return Api(api)
    except ValueError:
        names = ", ".join(a.value for a in Api)
        raise ValueError(f"unknown API {api!r}: expected one of {names}") from None
