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

from handlers.alarm import ALARM
from handlers.context import CallContext, within
from handlers.errors import ToolError
from handlers.limits import DEFAULT_LIMITS, Limits
from handlers.output import OutputError, serialize
from handlers.registry import Registry
from handlers.result import CallResult, Outcome
from handlers.text import clip, shown
from handlers.threads import RUNNERS, CallTimeout
from handlers.tool import RUN_AGAIN, InvalidArguments, Tool

log = logging.getLogger("toolfan.handlers")


def failed(outcome: Outcome, message: str, limits: Limits = DEFAULT_LIMITS) -> CallResult:
    """A failed result whose message is cut to the error limit (it may quote anything)."""
    return CallResult.fail(outcome, clip(message, limits.error_chars))


def timed_out(name: str, timeout: float, limits: Limits = DEFAULT_LIMITS) -> CallResult:
    """The result of a call to ``name`` that did not return within ``timeout`` seconds."""
    return failed(Outcome.TIMEOUT, f"Function {name!r} timed out after {timeout:g} s", limits)


def unknown_function(registry: Registry, name: str, limits: Limits = DEFAULT_LIMITS) -> CallResult:
    """The result for a call naming a function that is not registered."""
    available = ", ".join(registry.names()) or "(none)"
    shown = name if len(name) <= 200 else f"{name[:200]}..."
    return failed(
        Outcome.UNKNOWN_FUNCTION, f"Unknown function {shown!r}. Available: {available}", limits
    )


def outcome_unknown(tool: Tool[Any, Any]) -> CallResult:
    """The result for a non-idempotent call that may have run before a crash."""
    return CallResult.fail(
        Outcome.OUTCOME_UNKNOWN,
        f"Function {tool.name!r} may already have run; its outcome is unknown",
    )


def invalid_arguments(
    tool_name: str, problem: str, context: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS
) -> CallResult:
    """The failed result for arguments refused before (or instead of) validation."""
    log.info(
        "%s invalid arguments: %s",
        where(context),
        problem,
        extra=_extra(context, Outcome.INVALID_ARGUMENTS),
    )
    return failed(
        Outcome.INVALID_ARGUMENTS, f"Invalid arguments for {tool_name}: {problem}", limits
    )


def parse_arguments(
    tool: Tool[Any, Any],
    arguments: Any,
    context: Mapping[str, Any],
    limits: Limits = DEFAULT_LIMITS,
) -> BaseModel | CallResult:
    """Validated arguments, or the failed result explaining what is wrong with them."""
    try:
        return tool.parse(arguments, limits)
    except InvalidArguments as exc:
        return invalid_arguments(tool.name, str(exc), context, limits)


def run_call(
    tool: Tool[Any, Any],
    args: BaseModel,
    context: Mapping[str, Any],
    limits: Limits = DEFAULT_LIMITS,
    call_context: CallContext | None = None,
) -> CallResult:
    """Invoke the tool with validated arguments under its timeout; never raises.

    ``call_context`` goes to the tool's ``CallContext`` parameter, if it has one, and is
    what :func:`handlers.context.call_context` answers while the tool runs.
    """
    kwargs = tool.args.call_kwargs(args, call_context)
    call = lambda: tool.fn(**kwargs)  # noqa: E731
    return _guard(tool, call, tool.is_async, context, limits, call_context)


def run_reconcile(
    tool: Tool[Any, Any],
    args: BaseModel,
    context: Mapping[str, Any],
    limits: Limits = DEFAULT_LIMITS,
    call_context: CallContext | None = None,
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
        return _guard(tool, ask, False, context, limits, call_context)
    except _RunAgain:
        return None


class _RunAgain(BaseException):
    """Carries a ``RUN_AGAIN`` verdict past the error mapping, which catches Exception."""


def _guard(
    tool: Tool[Any, Any],
    call: Callable[[], Any],
    is_async: bool,
    context: Mapping[str, Any],
    limits: Limits,
    call_context: CallContext | None = None,
) -> CallResult:
    try:
        value = _with_timeout(call, tool.timeout, is_async, call_context)
        return CallResult.ok(serialize(value, tool.max_output_chars, limits))
    except ToolError as exc:
        message = exc.message if isinstance(exc.message, str) else safe_str(exc.message)
        log.info(
            "%s tool error: %s",
            where(context),
            message,
            extra=_extra(context, Outcome.TOOL_ERROR),
        )
        return failed(Outcome.TOOL_ERROR, message, limits)
    except CallTimeout:
        log.warning(
            "%s timed out after %g s",
            where(context),
            tool.timeout,
            extra=_extra(context, Outcome.TIMEOUT),
        )
        return timed_out(tool.name, tool.timeout, limits)
    except OutputError as exc:
        log.error(
            "%s unusable output: %s",
            where(context),
            exc,
            extra=_extra(context, Outcome.BAD_OUTPUT),
        )
        return failed(
            Outcome.BAD_OUTPUT,
            f"Function {tool.name!r} returned an unusable output: {exc}",
            limits,
        )
    except (Exception, RecursionError, MemoryError) as exc:
        log.error(
            "%s function raised %s",
            where(context),
            type(exc).__name__,
            exc_info=not isinstance(exc, MemoryError | RecursionError),
            extra=_extra(context, Outcome.EXCEPTION),
        )
        return failed(
            Outcome.EXCEPTION,
            f"Function {tool.name!r} failed: {type(exc).__name__}: {safe_str(exc)}",
            limits,
        )


def safe_str(value: object) -> str:
    """``str(value)``, or a stand-in when its ``__str__`` itself fails (hostile objects)."""
    try:
        text = str(value)
    except Exception as exc:  # a broken __str__ must not turn one failure into two
        return f"<unprintable {type(value).__name__}: {type(exc).__name__}>"
    return text if isinstance(text, str) else f"<unprintable {type(value).__name__}>"


#: Seconds an async tool's event loop gets after its timeout to finish cancelling.
CANCEL_GRACE = 1.0


def _with_timeout(
    call: Callable[[], Any],
    timeout: float,
    is_async: bool,
    call_context: CallContext | None = None,
) -> Any:
    """Run ``call`` under ``timeout`` and return its value, or raise :class:`CallTimeout`.

    In a process that enabled :data:`~handlers.alarm.ALARM` (a prefork pool process), a
    function runs on this very thread under a timer (see :mod:`handlers.alarm`); elsewhere,
    and for coroutines, in a runner thread. Coroutines run on their own event loop in that
    thread and are cancelled at the deadline. A function (or a coroutine blocking its loop)
    that overruns is abandoned: the runner pool tries to stop it and reports it when it
    will not stop (see :mod:`handlers.threads`), and the task's hard time limit remains
    the backstop. The call context is current while it runs (and so in the event loop's
    tasks, which copy it).
    """
    if is_async:
        loop = lambda: asyncio.run(_await_with_timeout(call, timeout))  # noqa: E731
        return RUNNERS.run(lambda: within(call_context, loop), timeout + CANCEL_GRACE)
    if ALARM.usable():
        return within(call_context, lambda: ALARM.run(call, timeout, call_context))
    return RUNNERS.run(lambda: within(call_context, call), timeout)


async def _await_with_timeout(call: Callable[[], Any], timeout: float) -> Any:
    try:
        return await asyncio.wait_for(call(), timeout)
    except TimeoutError as exc:
        raise CallTimeout from exc


def where(context: Mapping[str, Any]) -> str:
    """The ids of a call as ``key=value`` pairs, so plain-text log lines carry them too.

    Values other than plain tokens are shown as Python literals (quoted, escaped, cut),
    so an id holding a newline or ``=`` cannot forge a log line or a field.
    """
    return " ".join(f"{k}={shown(v)}" for k, v in context.items())


def _extra(context: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    return {**context, "outcome": outcome.value}
