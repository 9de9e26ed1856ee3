"""Tools written for the official ``openai`` SDK, run by toolfan unchanged.

``openai.lib.beta.agents.function_tool`` and ``pydantic_function_tool`` make a
``FunctionTool``: a name, a flat definition, a pydantic arguments model (``_model``) and a
handler that takes the validated model (``_handler``). The SDK runs such tools one at a time
in the process streaming the session, with no timeout; here each becomes a :class:`Tool`
like any ``@tool`` function, so it gets the fleet's validation, timeouts, logging and error
results. Its Agents definition keeps the SDK's own ``parameters``.

``openai`` stays optional: a ``FunctionTool`` can only exist once the SDK module defining
it was imported, so the class is looked up in ``sys.modules``, never imported from here.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from handlers.errors import RegistryError
from handlers.output import OutputError
from handlers.signature import ArgsSpec
from handlers.tool import Tool, queue_for

#: Where the SDK defines ``FunctionTool`` (and re-exports it), newest layout first.
_SDK_MODULES = ("openai.lib.beta.agents._tools", "openai.lib.beta.agents")
#: The name of the one parameter of the wrapper every SDK tool runs through.
_ARGUMENTS = "arguments"

Convert = Callable[[object], object]


def function_tool_class() -> type[Any] | None:
    """The SDK's ``FunctionTool`` class if the SDK is imported, else None."""
    for name in _SDK_MODULES:
        found = getattr(sys.modules.get(name), "FunctionTool", None)
        if isinstance(found, type):
            return found
    return None


def is_sdk_tool(value: object) -> bool:
    """Whether ``value`` is a tool made with the official SDK's agents helpers."""
    cls = function_tool_class()
    return cls is not None and isinstance(value, cls)


def build_sdk_tool(
    sdk_tool: Any,
    *,
    name: str | None = None,
    description: str | None = None,
    queue: str | None = None,
    defer_loading: bool | None = None,
    **options: Any,
) -> Tool[Any, Any]:
    """A :class:`Tool` running an SDK ``FunctionTool``; unset options come from the SDK tool.

    Raises:
        RegistryError: the object lacks what every ``FunctionTool`` has (an SDK too new?).
    """
    definition, model = _parts(sdk_tool)
    tool_name = name or str(definition["name"])
    if description is None:
        description = str(definition.get("description") or "")
    deferred = definition.get("defer_loading", False) if defer_loading is None else defer_loading
    return Tool(
        fn=sdk_caller(sdk_tool),
        name=tool_name,
        description=description,
        args=ArgsSpec(model, _ARGUMENTS),
        queue=queue or queue_for(tool_name),
        defer_loading=bool(deferred),
        parameters=definition["parameters"],
        origin=sdk_tool,
        **options,
    )


def _parts(sdk_tool: Any) -> tuple[dict[str, Any], type[BaseModel]]:
    definition = getattr(sdk_tool, "definition", None)
    model = getattr(sdk_tool, "_model", None)
    if (
        isinstance(definition, dict)
        and isinstance(definition.get("parameters"), dict)
        and inspect.isclass(model)
        and issubclass(model, BaseModel)
    ):
        return definition, model
    raise RegistryError(
        f"cannot adapt SDK tool {sdk_tool!r}: expected a definition with parameters and "
        "a pydantic _model (has the openai SDK changed?)"
    )


def sdk_caller(sdk_tool: Any) -> Callable[..., Any]:
    """The function a :class:`Tool` runs for an SDK tool.

    Called with a dict it is exactly the SDK tool (``tool(arguments)``), so a registered
    SDK tool stays callable as before. Called by the runner with the arguments already
    validated (a model instance), it calls the handler with them and applies the SDK's own
    output conversion, so the arguments are not validated twice; where that path is not
    open (a subclass overriding ``__call__``, or an SDK without ``_tool_output``) it calls
    the tool with the arguments dumped back to a dict. An async handler makes an async
    function, which the runner awaits on its event loop under the tool's timeout.
    """
    handler = getattr(sdk_tool, "_handler", None)
    convert = _converter(sdk_tool)
    direct = callable(handler) and convert is not None and not _overrides_call(sdk_tool)
    if inspect.iscoroutinefunction(handler):
        return _async_caller(sdk_tool, handler if direct else None, convert)
    return _sync_caller(sdk_tool, handler if direct else None, convert)


def _sync_caller(
    sdk_tool: Any, handler: Callable[[BaseModel], object] | None, convert: Convert | None
) -> Callable[[BaseModel | dict[str, Any]], Any]:
    def call(arguments: BaseModel | dict[str, Any]) -> Any:
        if isinstance(arguments, dict):
            return sdk_tool(arguments)
        if handler is None or convert is None:
            return _finish(_settled(sdk_tool(_as_dict(arguments))), _as_sent)
        return _finish(_settled(handler(arguments)), convert)

    return call


def _async_caller(
    sdk_tool: Any, handler: Callable[[BaseModel], object] | None, convert: Convert | None
) -> Callable[[BaseModel | dict[str, Any]], Awaitable[Any]]:
    async def call(arguments: BaseModel | dict[str, Any]) -> Any:
        if isinstance(arguments, dict):
            return await sdk_tool(arguments)
        if handler is None or convert is None:
            return _finish(await _awaited(sdk_tool(_as_dict(arguments))), _as_sent)
        return _finish(await _awaited(handler(arguments)), convert)

    return call


def _converter(sdk_tool: Any) -> Convert | None:
    """The SDK's output conversion for this tool: its own, or None when it is unknown.

    A ``FunctionTool`` built directly hands back what its handler returns; the helpers
    (``function_tool``, ``pydantic_function_tool``) turn models, mappings and iterables
    into a string or a content list with the module's ``_tool_output``.
    """
    if not getattr(sdk_tool, "_convert_output", False):
        return _as_sent
    found = getattr(sys.modules.get(type(sdk_tool).__module__), "_tool_output", None)
    return found if callable(found) else None


def _as_sent(value: object) -> object:
    """An unconverted handler value as the SDK's stream sends it: an iterable as a list.

    Strings, mappings and models stay whole (our output rules write them as JSON).
    """
    if isinstance(value, str | bytes | Mapping | BaseModel) or not isinstance(value, Iterable):
        return value
    return list(value)


def _overrides_call(sdk_tool: Any) -> bool:
    """Whether a subclass replaced ``__call__`` (then only calling the tool is faithful)."""
    base = function_tool_class()
    return base is not None and type(sdk_tool).__call__ is not base.__call__


def _as_dict(arguments: BaseModel) -> dict[str, Any]:
    """Validated arguments back as the dict the model sent (by alias, defaults left out)."""
    return arguments.model_dump(by_alias=True, exclude_unset=True)


def _settled(value: object) -> object:
    """A sync handler's value; an awaitable it returned is run to its end here.

    ``asyncio`` is imported only then: ``toolfan worker -P gevent`` imports the tool API
    before patching the standard library, and asyncio brings ``ssl`` along.
    """
    if not inspect.isawaitable(value):
        return value
    import asyncio

    return asyncio.run(_awaited(value))


async def _awaited(value: object) -> object:
    return await value if inspect.isawaitable(value) else value


def _finish(value: object, convert: Convert) -> object:
    """The SDK's conversion, then None as the empty output (the SDK sends no output).

    A conversion failure (``json.dumps`` of a value it cannot write) is an unusable
    output, as it is for ``@tool`` functions, not an exception of the tool.
    """
    try:
        value = convert(value)
    except (TypeError, ValueError) as exc:
        raise OutputError(f"the SDK cannot convert it ({exc})") from exc
    return "" if value is None else value
