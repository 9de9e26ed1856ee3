"""Running one call: validate, invoke under the timeout, serialize, and map every failure.

:func:`run_call` never raises. Each way a call can go wrong becomes a ``success: false``
result whose message the model can act on; the full traceback goes to the log only, with
the ids the caller passes in ``context``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from handlers.errors import ToolError
from handlers.output import OutputError, serialize
from handlers.registry import Registry
from handlers.result import CallResult, Outcome
from handlers.threads import RUNNERS, CallTimeout
from handlers.tool import RUN_AGAIN, InvalidArguments, Tool

log = logging.getLogger("toolfan.handlers")


def unknown_function(registry: Registry, name: str) -> CallResult:
    """The result for a call naming a function that is not registered."""
    available = ", ".join(registry.names()) or "(none)"
    return CallResult.fail(
        Outcome.UNKNOWN_FUNCTION, f"Unknown function {name!r}. Available: {available}"
    )


def outcome_unknown(tool: Tool[Any, Any]) -> CallResult:
    """The result for a non-idempotent call that may have run before a crash."""
    return CallResult.fail(
        Outcome.OUTCOME_UNKNOWN,
        f"Function {tool.name!r} may already have run; its outcome is unknown",
    )


def parse_arguments(
    tool: Tool[Any, Any], arguments: Any, context: Mapping[str, Any]
) -> BaseModel | CallResult:
    """Validated arguments, or the failed result explaining what is wrong with them."""
    try:
        return tool.parse(arguments)
    except InvalidArguments as exc:
        log.info(
            "%s invalid arguments: %s",
            where(context),
            exc,
            extra=_extra(context, Outcome.INVALID_ARGUMENTS),
        )
        return CallResult.fail(
            Outcome.INVALID_ARGUMENTS, f"Invalid arguments for {tool.name}: {exc}"
        )


def run_call(tool: Tool[Any, Any], args: BaseModel, context: Mapping[str, Any]) -> CallResult:
    """Invoke the tool with validated arguments under its timeout; never raises."""
    return _guard(tool, lambda: tool.fn(**tool.args.call_kwargs(args)), tool.is_async, context)


def run_reconcile(
    tool: Tool[Any, Any], args: BaseModel, context: Mapping[str, Any]
) -> CallResult | None:
    """Ask a non-idempotent tool's ``reconcile`` hook what became of an interrupted call.

    Returns:
        The result to submit, or None when the hook says the call did not run (run again).
        Without a hook, the "outcome unknown" failure.
    """
    hook = tool.reconcile
    if hook is None:
        return outcome_unknown(tool)

    def ask() -> Any:
        verdict = hook(args)
        if verdict is RUN_AGAIN:
            raise _RunAgain
        return verdict

    try:
        return _guard(tool, ask, False, context)
    except _RunAgain:
        return None


class _RunAgain(BaseException):
    """Carries a ``RUN_AGAIN`` verdict past the error mapping, which catches Exception."""


def _guard(
    tool: Tool[Any, Any], call: Callable[[], Any], is_async: bool, context: Mapping[str, Any]
) -> CallResult:
    try:
        value = _with_timeout(call, tool.timeout, is_async)
        return CallResult.ok(serialize(value, tool.max_output_chars))
    except ToolError as exc:
        log.info(
            "%s tool error: %s",
            where(context),
            exc.message,
            extra=_extra(context, Outcome.TOOL_ERROR),
        )
        return CallResult.fail(Outcome.TOOL_ERROR, exc.message)
    except CallTimeout:
        log.warning(
            "%s timed out after %g s",
            where(context),
            tool.timeout,
            extra=_extra(context, Outcome.TIMEOUT),
        )
        return CallResult.fail(
            Outcome.TIMEOUT, f"Function {tool.name!r} timed out after {tool.timeout:g} s"
        )
    except OutputError as exc:
        log.error(
            "%s unusable output: %s",
            where(context),
            exc,
            extra=_extra(context, Outcome.BAD_OUTPUT),
        )
        return CallResult.fail(
            Outcome.BAD_OUTPUT, f"Function {tool.name!r} returned an unusable output: {exc}"
        )
    except Exception as exc:
        log.exception(
            "%s function raised", where(context), extra=_extra(context, Outcome.EXCEPTION)
        )
        return CallResult.fail(
            Outcome.EXCEPTION, f"Function {tool.name!r} failed: {type(exc).__name__}: {exc}"
        )


def _with_timeout(call: Callable[[], Any], timeout: float, is_async: bool) -> Any:
    """Run ``call`` and return its value, or raise :class:`CallTimeout`.

    Coroutines are cancelled at the deadline. Plain functions run in a daemon thread that
    is abandoned at the deadline (Python cannot stop a thread): its eventual value is
    discarded, and the task's hard time limit remains the backstop for runaway code.
    """
    if is_async:
        return asyncio.run(_await_with_timeout(call, timeout))
    return RUNNERS.run(call, timeout)


async def _await_with_timeout(call: Callable[[], Any], timeout: float) -> Any:
    try:
        return await asyncio.wait_for(call(), timeout)
    except TimeoutError as exc:
        raise CallTimeout from exc


def where(context: Mapping[str, Any]) -> str:
    """The ids of a call as ``key=value`` pairs, so plain-text log lines carry them too."""
    return " ".join(f"{k}={v}" for k, v in context.items())


def _extra(context: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    return {**context, "outcome": outcome.value}
