"""The registry of tools: the ``@tool`` decorator and the modules that fill it.

Only registered functions ever run: a call naming anything else is answered with an
"unknown function" error. Every process (worker, poller, CLI) imports the same modules
(``TOOLFAN_HANDLERS``) so they all agree on the set of tools and their queues.

Tools written for the official SDK (``openai.lib.beta.agents.function_tool``) register too:
passed to :meth:`Registry.tool`, or found at module level by :meth:`Registry.load`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any, ParamSpec, TypeVar, cast, overload

from handlers.errors import RegistryError
from handlers.sdk import build_sdk_tool, function_tool_class, is_sdk_tool
from handlers.signature import args_spec, describe
from handlers.tool import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIMEOUT, Tool, queue_for

P = ParamSpec("P")
R = TypeVar("R")


class Registry:
    """A set of tools by name; the module-level :data:`registry` is the default one."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any, Any]] = {}
        self._scanned: set[str] = set()

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool[Any, Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool[Any, Any] | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def queues(self) -> list[str]:
        """The distinct queues of the registered tools, sorted."""
        return sorted({t.queue for t in self._tools.values()})

    def add(self, tool: Tool[Any, Any]) -> None:
        """Register a tool built elsewhere.

        Raises:
            RegistryError: another function already uses the name.
        """
        existing = self._tools.get(tool.name)
        if existing is not None and _source(existing) is not _source(tool):
            raise RegistryError(f"two tools are named {tool.name!r}: rename one with name=...")
        self._tools[tool.name] = tool

    def definitions(self) -> list[dict[str, Any]]:
        """Function definitions of every tool, in name order."""
        return [self._tools[name].definition() for name in self.names()]

    def agent_tools(self) -> list[dict[str, Any]]:
        """The ``agent.tools`` array: the functions, plus tool search when any is deferred."""
        tools = self.definitions()
        if any(t["defer_loading"] for t in tools):
            tools.append({"type": "tool_search"})
        return tools

    @overload
    def tool(self, fn: Callable[P, R], /) -> Tool[P, R]: ...

    @overload
    def tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        queue: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        idempotent: bool = True,
        reconcile: Callable[[Any], Any] | None = None,
        defer_loading: bool | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        authorize: Callable[..., Any] | None = None,
        requires_approval: bool = False,
    ) -> Callable[[Callable[P, R]], Tool[P, R]]: ...

    def tool(  # type: ignore[misc]  # mypy misreads a ParamSpec only in the return type
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        queue: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        idempotent: bool = True,
        reconcile: Callable[[Any], Any] | None = None,
        defer_loading: bool | None = None,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        authorize: Callable[..., Any] | None = None,
        requires_approval: bool = False,
    ) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
        """Register a function as a tool, bare (``@tool``) or with options (``@tool(...)``).

        Options: ``name`` (default: the function's name), ``description`` (default: the
        docstring), ``queue`` (default ``fn.<name>``), ``timeout`` seconds, ``idempotent``,
        ``reconcile`` (for non-idempotent tools: decides after a crash whether the call ran),
        ``defer_loading`` (hidden until found by tool search), ``max_output_chars``,
        ``authorize`` (this tool's policy, see :mod:`handlers.policy`; instead of
        ``TOOLFAN_POLICY``), ``requires_approval`` (every call waits for a person).

        ``fn`` may also be a ``FunctionTool`` of the official SDK (``function_tool``,
        ``pydantic_function_tool``); its name, description and ``defer_loading`` are then
        the defaults, and its definition's ``parameters`` its Agents schema.
        """

        def register(func: Callable[P, R]) -> Tool[P, R]:
            built = build_tool(
                func,
                name=name,
                description=description,
                queue=queue,
                timeout=timeout,
                idempotent=idempotent,
                reconcile=reconcile,
                defer_loading=defer_loading,
                max_output_chars=max_output_chars,
                authorize=authorize,
                requires_approval=requires_approval,
            )
            self.add(built)
            return built

        return register(fn) if fn is not None else register

    def load(self, modules: Iterable[str]) -> None:
        """Import tool modules; their ``@tool`` decorators fill the registry.

        Each module's SDK tools (module-level ``FunctionTool`` objects not registered yet)
        are registered too, with the default options.

        Raises:
            RegistryError: a module cannot be imported (the message names it), or one of
                its SDK tools cannot be registered.
        """
        for module in modules:
            try:
                imported = importlib.import_module(module)
            except ImportError as exc:
                raise RegistryError(f"cannot import tool module {module!r}: {exc}") from exc
            self._adopt_sdk_tools(imported)

    def _adopt_sdk_tools(self, module: ModuleType) -> None:
        """Register the module's SDK tools that no ``tool(...)`` call registered already.

        A module is scanned once: every call handled reloads the registry. Without the SDK
        imported, no ``FunctionTool`` can exist, so there is nothing to look for.
        """
        if module.__name__ in self._scanned:
            return
        if function_tool_class() is not None:
            known = {id(t.origin) for t in self._tools.values() if t.origin is not None}
            for value in list(vars(module).values()):
                if is_sdk_tool(value) and id(value) not in known:
                    self.add(build_sdk_tool(value))
                    known.add(id(value))
        self._scanned.add(module.__name__)


def build_tool(
    fn: Callable[P, R],
    *,
    name: str | None = None,
    description: str | None = None,
    queue: str | None = None,
    defer_loading: bool | None = None,
    **options: Any,
) -> Tool[P, R]:
    """Build a :class:`Tool` from a function (or an SDK ``FunctionTool``) and options."""
    if is_sdk_tool(fn):
        built = build_sdk_tool(
            fn,
            name=name,
            description=description,
            queue=queue,
            defer_loading=defer_loading,
            **options,
        )
        return cast(Tool[P, R], built)  # called with a dict, it is the SDK tool: same P, R
    tool_name = name or fn.__name__
    doc, arg_docs = describe(fn)
    return Tool(
        fn=fn,
        name=tool_name,
        description=description if description is not None else doc,
        args=args_spec(fn, tool_name, arg_docs),
        queue=queue or queue_for(tool_name),
        defer_loading=bool(defer_loading),
        **options,
    )


def _source(tool: Tool[Any, Any]) -> object:
    """What a tool was made from: the SDK tool it wraps, else its function."""
    return tool.origin if tool.origin is not None else tool.fn


#: The process-wide registry filled by ``@tool`` in the ``TOOLFAN_HANDLERS`` modules.
registry = Registry()
tool = registry.tool
