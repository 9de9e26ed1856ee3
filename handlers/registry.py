"""The registry of tools: the ``@tool`` decorator and the modules that fill it.

Only registered functions ever run: a call naming anything else is answered with an
"unknown function" error. Every process (worker, poller, CLI) imports the same modules
(``TOOLFAN_HANDLERS``) so they all agree on the set of tools and their queues.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar, overload

from handlers.errors import RegistryError
from handlers.signature import args_spec, describe
from handlers.tool import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIMEOUT, Tool, queue_for

P = ParamSpec("P")
R = TypeVar("R")


class Registry:
    """A set of tools by name; the module-level :data:`registry` is the default one."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any, Any]] = {}

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
        if existing is not None and existing.fn is not tool.fn:
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
        defer_loading: bool = False,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
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
        defer_loading: bool = False,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
        """Register a function as a tool, bare (``@tool``) or with options (``@tool(...)``).

        Options: ``name`` (default: the function's name), ``description`` (default: the
        docstring), ``queue`` (default ``fn.<name>``), ``timeout`` seconds, ``idempotent``,
        ``reconcile`` (for non-idempotent tools: decides after a crash whether the call ran),
        ``defer_loading`` (hidden until found by tool search), ``max_output_chars``.
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
            )
            self.add(built)
            return built

        return register(fn) if fn is not None else register

    def load(self, modules: Iterable[str]) -> None:
        """Import tool modules; their ``@tool`` decorators fill the registry.

        Raises:
            RegistryError: a module cannot be imported (the message names it).
        """
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise RegistryError(f"cannot import tool module {module!r}: {exc}") from exc


def build_tool(
    fn: Callable[P, R],
    *,
    name: str | None = None,
    description: str | None = None,
    queue: str | None = None,
    **options: Any,
) -> Tool[P, R]:
    """Build a :class:`Tool` from a function and decorator options."""
    tool_name = name or fn.__name__
    doc, arg_docs = describe(fn)
    return Tool(
        fn=fn,
        name=tool_name,
        description=description if description is not None else doc,
        args=args_spec(fn, tool_name, arg_docs),
        queue=queue or queue_for(tool_name),
        **options,
    )


#: The process-wide registry filled by ``@tool`` in the ``TOOLFAN_HANDLERS`` modules.
registry = Registry()
tool = registry.tool
