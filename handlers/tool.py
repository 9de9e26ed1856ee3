"""One registered function tool: its options, its definition for the agent, its arguments."""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, ParamSpec, TypeVar

from pydantic import BaseModel, ValidationError

from handlers import jsonsafe
from handlers.errors import RegistryError
from handlers.limits import DEFAULT_LIMITS, Limits
from handlers.nulls import without_default_nulls
from handlers.schema import parameters_schema
from handlers.signature import ArgsSpec

P = ParamSpec("P")
R = TypeVar("R")

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_QUEUE = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")

DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_MAX_OUTPUT_CHARS: Final = 100_000


class _RunAgain:
    """Type of :data:`RUN_AGAIN`."""

    def __repr__(self) -> str:
        return "RUN_AGAIN"


#: Returned by a ``reconcile`` hook to say the function did not run and may run again.
RUN_AGAIN: Final = _RunAgain()


class InvalidArguments(ValueError):
    """Arguments that are not JSON, not an object, or fail the tool's model."""


def queue_for(name: str) -> str:
    """The default queue of a tool: one queue per function, so each gets its own workers."""
    return f"fn.{name}"


@dataclass(frozen=True, eq=False)
class Tool(Generic[P, R]):
    """A function registered as a tool, still callable as the plain function it wraps.

    ``parameters`` and ``origin`` serve tools made by another library (the official SDK's
    ``FunctionTool``, see :mod:`handlers.sdk`): the schema that library wrote, used as is
    in the Agents form, and the object itself, so the registry knows it registered it.
    """

    fn: Callable[P, R]
    name: str
    description: str
    args: ArgsSpec
    queue: str
    timeout: float = DEFAULT_TIMEOUT
    idempotent: bool = True
    reconcile: Callable[[Any], Any] | None = None
    defer_loading: bool = False
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    parameters: dict[str, Any] | None = None
    origin: object | None = None
    authorize: Callable[..., Any] | None = None
    requires_approval: bool = False

    def __post_init__(self) -> None:
        _check_options(self)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the plain function, so tools stay testable without toolfan."""
        return self.fn(*args, **kwargs)

    @property
    def is_async(self) -> bool:
        """Whether the function is a coroutine function (run on an event loop)."""
        return inspect.iscoroutinefunction(self.fn)

    def definition(self) -> dict[str, Any]:
        """The function definition as placed in ``agent.tools``."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters_schema(),
            "defer_loading": self.defer_loading,
        }

    def parameters_schema(self) -> dict[str, Any]:
        """The ``parameters`` of the Agents form: the given schema, else the model's."""
        if self.parameters is not None:
            return copy.deepcopy(self.parameters)
        return parameters_schema(self.args.model)

    def parse(self, arguments: Any, limits: Limits = DEFAULT_LIMITS) -> BaseModel:
        """Validate raw call arguments (a JSON object, or a string holding one).

        Size and nesting are checked before anything else reads the arguments, so a
        hostile value costs one clear refusal, never a crash of the parser or validator.

        Raises:
            InvalidArguments: with a message naming every invalid field and why.
        """
        if isinstance(arguments, str | bytes):
            arguments = _decode(arguments, limits)
        problem = jsonsafe.check(arguments, max_depth=limits.depth, max_bytes=limits.argument_bytes)
        if problem is not None:
            raise InvalidArguments(problem)
        if not isinstance(arguments, dict):
            raise InvalidArguments(f"expected a JSON object, got {_json_type(arguments)}")
        return _validate(self.args.model, arguments)


def _validate(model: type[BaseModel], arguments: dict[str, Any]) -> BaseModel:
    """Validate, reading a refused ``null`` for a property with a default as that default.

    A strict schema makes such properties required but nullable, so the model sends
    ``null`` where it means "the default" (see :mod:`handlers.nulls`).
    """
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        retry = without_default_nulls(model, arguments, exc.errors(include_url=False))
        if retry is None:
            raise InvalidArguments(_describe_errors(exc)) from exc
    try:
        return model.model_validate(retry)
    except ValidationError as exc:
        raise InvalidArguments(_describe_errors(exc)) from exc


def _check_options(tool: Tool[Any, Any]) -> None:
    if not _NAME.match(tool.name):
        raise RegistryError(f"tool name {tool.name!r} must match {_NAME.pattern}")
    if not _QUEUE.match(tool.queue):
        raise RegistryError(f"tool {tool.name!r}: queue {tool.queue!r} must match {_QUEUE.pattern}")
    if not tool.timeout > 0:
        raise RegistryError(f"tool {tool.name!r}: timeout must be positive")
    if tool.max_output_chars < 100:
        raise RegistryError(f"tool {tool.name!r}: max_output_chars must be at least 100")
    if tool.reconcile is not None and tool.idempotent:
        raise RegistryError(f"tool {tool.name!r}: reconcile is for idempotent=False tools")
    if inspect.iscoroutinefunction(tool.reconcile):
        raise RegistryError(f"tool {tool.name!r}: reconcile must be a plain (not async) function")
    if tool.authorize is not None and (
        not callable(tool.authorize) or inspect.iscoroutinefunction(tool.authorize)
    ):
        raise RegistryError(f"tool {tool.name!r}: authorize must be a plain (not async) function")


def _decode(text: str | bytes, limits: Limits) -> Any:
    size = len(text) if isinstance(text, bytes) else _utf8_size(text, limits.argument_bytes)
    if size > limits.argument_bytes:
        raise InvalidArguments(f"{size:,} bytes (at most {limits.argument_bytes:,})")
    try:
        return jsonsafe.loads(text, max_depth=limits.depth)
    except ValueError as exc:
        raise InvalidArguments(f"not valid JSON ({exc})") from exc


def _utf8_size(text: str, limit: int) -> int:
    """The UTF-8 size of ``text``, or a lower bound of it already over ``limit``."""
    if len(text) > limit or len(text) * 4 <= limit:
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "a value")


#: Validation errors named in one message at most, and characters of a field name shown.
_MAX_ERRORS, _MAX_NAME = 20, 60


def _describe_errors(exc: ValidationError) -> str:
    """Every invalid field and why, with hostile field names (100 KB keys) cut short."""
    errors = exc.errors(include_url=False)
    parts = []
    for error in errors[:_MAX_ERRORS]:
        where = ".".join(_name(str(p)) for p in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    if len(errors) > _MAX_ERRORS:
        parts.append(f"and {len(errors) - _MAX_ERRORS:,} more")
    return "; ".join(parts)


def _name(part: str) -> str:
    return part if len(part) <= _MAX_NAME else f"{part[:_MAX_NAME]}... ({len(part):,} characters)"
