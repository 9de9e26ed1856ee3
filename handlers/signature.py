"""Reading a tool's arguments and description off its Python signature and docstring.

A tool takes either typed parameters (descriptions through ``Annotated[..., Field(...)]``
or the docstring's ``Args:`` section) or one pydantic model parameter. Both end as one
pydantic model that validates incoming arguments and writes the JSON Schema.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Annotated, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from handlers.context import CallContext, is_context_annotation
from handlers.errors import RegistryError

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ArgsSpec:
    """How a tool's validated arguments map back onto its call.

    ``context_param`` names the parameter annotated :class:`CallContext`, if any: it is in
    no schema, and gets the call's context, never a value the model sent.
    """

    def __init__(
        self, model: type[BaseModel], model_param: str | None, context_param: str | None = None
    ) -> None:
        self.model = model
        self.model_param = model_param
        self.context_param = context_param

    def call_kwargs(self, args: BaseModel, context: CallContext | None = None) -> dict[str, Any]:
        """Keyword arguments for the tool function from validated arguments (and context)."""
        if self.model_param is not None:
            kwargs: dict[str, Any] = {self.model_param: args}
        else:
            kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.context_param is not None:
            kwargs[self.context_param] = context
        return kwargs


def describe(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """Split a docstring into the tool description and per-argument descriptions."""
    doc = inspect.getdoc(fn) or ""
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        header = _SECTION.match(line.strip())
        if header and not line.startswith(" "):
            section, current = header.group(1), None
        elif section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            current = _read_arg_line(line, args, current)
    return "\n".join(description).strip(), args


def _read_arg_line(line: str, args: dict[str, str], current: str | None) -> str | None:
    stripped = line.strip()
    match = _ARG_LINE.match(stripped)
    if match and (line.startswith("    ") and not line.startswith("        ")):
        args[match.group(1)] = match.group(2).strip()
        return match.group(1)
    if current and stripped:
        args[current] = f"{args[current]} {stripped}".strip()
    return current


def args_spec(fn: Callable[..., Any], name: str, arg_docs: dict[str, str]) -> ArgsSpec:
    """Build the arguments model of ``fn``.

    Raises:
        RegistryError: a parameter lacks a type hint or is ``*args``/``**kwargs``.
    """
    params = list(inspect.signature(fn).parameters.values())
    hints = get_type_hints(fn, include_extras=True)
    context = _context_param(params, hints, name)
    params = [p for p in params if p.name != context]
    if len(params) == 1 and _is_model(hints.get(params[0].name)):
        return ArgsSpec(hints[params[0].name], params[0].name, context)
    fields: dict[str, Any] = {}
    for param in params:
        fields[param.name] = _field(param, hints, name, arg_docs.get(param.name))
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return ArgsSpec(model, None, context)


def _context_param(params: list[inspect.Parameter], hints: dict[str, Any], tool: str) -> str | None:
    """The one parameter annotated ``CallContext``, if any.

    Raises:
        RegistryError: two parameters ask for it.
    """
    found = [p.name for p in params if is_context_annotation(_bare(hints.get(p.name)))]
    if len(found) > 1:
        raise RegistryError(f"tool {tool!r}: one CallContext parameter at most, got {found}")
    return found[0] if found else None


def _bare(annotation: Any) -> Any:
    """An annotation without ``Annotated[...]`` metadata."""
    return (
        getattr(annotation, "__origin__", annotation)
        if hasattr(annotation, "__metadata__")
        else annotation
    )


def _field(
    param: inspect.Parameter, hints: dict[str, Any], tool: str, doc: str | None
) -> tuple[Any, Any]:
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        raise RegistryError(f"tool {tool!r}: *args and **kwargs cannot be described to a model")
    if param.name not in hints:
        raise RegistryError(f"tool {tool!r}: parameter {param.name!r} needs a type hint")
    annotation = hints[param.name]
    if doc and not _has_description(annotation):
        annotation = Annotated[annotation, Field(description=doc)]
    default = ... if param.default is param.empty else param.default
    return annotation, default


def _has_description(annotation: Any) -> bool:
    metadata = getattr(annotation, "__metadata__", ())
    return any(getattr(m, "description", None) for m in metadata)


def _is_model(annotation: Any) -> bool:
    return inspect.isclass(annotation) and issubclass(annotation, BaseModel)
