"""The ``execute`` task: run one function call at most once, and always return a result.

The plain function :func:`execute_call` holds the logic and is tested without Celery; the
task is a thin wrapper. It never raises: a raised exception in a chord header means the
callback never runs, so the session's other results would never be submitted.
"""

from __future__ import annotations

import logging
import time
from functools import cache
from typing import Any

from celery import Task
from celery.canvas import Signature

from handlers.registry import Registry
from handlers.result import CallResult, Outcome
from handlers.runner import (
    parse_arguments,
    run_call,
    run_reconcile,
    unknown_function,
    where,
)
from tasks import metrics
from tasks.app import app
from tasks.config import hard_limit
from tasks.ledger import CallRef, Ledger, LedgerError
from tasks.queues import EXECUTE_TASK, execute_queue
from tasks.settings import get_settings, load_registry

log = logging.getLogger("toolfan.execute")

LEDGER_RETRIES = 5
#: Seconds allowed for answering a call to an unregistered function.
UNKNOWN_TOOL_TIMEOUT = 10.0
#: What task events and Flower show in place of a call's argument values.
HIDDEN = "<arguments hidden>"
#: Seconds kept free before the task's hard time limit while saving a result.
SAVE_MARGIN = 0.5
#: First and longest pause between attempts to save a result while the ledger is down.
SAVE_BACKOFF = (0.05, 1.0)


@cache
def get_ledger() -> Ledger:
    """The ledger of this process, on ``TOOLFAN_REDIS_URL``."""
    settings = get_settings()
    return Ledger.from_url(settings.redis_url, settings.ledger_ttl)


def execute_call(
    ref: CallRef, name: str, arguments: Any, ledger: Ledger, registry: Registry
) -> CallResult:
    """Run one call unless the ledger already holds its result; save and return the result.

    Raises:
        LedgerError: the ledger is unreachable, so "at most once" cannot be guaranteed;
            the caller retries later rather than run the function unrecorded.
    """
    context = {
        "session_id": ref.session_id,
        "turn_id": ref.turn_id,
        "call_id": ref.call_id,
        "function": name,
    }
    begin = ledger.begin(ref, name)
    if begin.saved is not None:
        log.info("%s returning saved result", where(context), extra=context)
        return begin.saved
    if log.isEnabledFor(logging.DEBUG):  # argument values: DEBUG only, and not built otherwise
        log.debug("%s arguments", where(context), extra={**context, "arguments": arguments})
    max_attempts = get_settings().max_attempts
    started = time.perf_counter()
    if begin.attempts > max_attempts:
        log.error(
            "%s poison call: attempt %d of at most %d; giving up",
            where(context),
            begin.attempts,
            max_attempts,
            extra=context,
        )
        produced = poison(name, max_attempts)
    else:
        produced = _produce(name, arguments, begin.attempts, registry, context)
    elapsed = time.perf_counter() - started
    deadline = started + _hard_limit(registry, name) - SAVE_MARGIN
    result = save_result(ledger, ref, produced, deadline, context)
    _report(result, elapsed, name in registry, context)
    return result


def save_result(
    ledger: Ledger, ref: CallRef, produced: CallResult, deadline: float, context: dict[str, Any]
) -> CallResult:
    """Save ``produced``, retrying while the ledger is down until ``deadline`` (perf_counter).

    The result exists only in this process once the function has run: giving up at the
    first failed write would make the redelivered task run the function again. FINISH keeps
    the first saved result, so repeating it after a lost reply is harmless.

    Raises:
        LedgerError: the ledger stayed unreachable until the deadline.
    """
    pause, longest = SAVE_BACKOFF
    while True:
        try:
            return ledger.finish(ref, produced)
        except LedgerError as exc:
            if time.perf_counter() + pause > deadline:
                raise
            log.warning(
                "%s saving the result failed, retrying in %.2fs: %s",
                where(context),
                pause,
                exc,
                extra=context,
            )
            time.sleep(pause)
            pause = min(pause * 2, longest)


def tool_timeout(registry: Registry, name: str) -> float:
    """Seconds a call to ``name`` may run: its tool's timeout, or the unknown-function one."""
    tool = registry.get(name)
    return tool.timeout if tool is not None else UNKNOWN_TOOL_TIMEOUT


def _hard_limit(registry: Registry, name: str) -> float:
    return hard_limit(get_settings(), tool_timeout(registry, name))


def _report(result: CallResult, elapsed: float, known: bool, context: dict[str, Any]) -> None:
    """One log line and the metrics for a call that was just answered."""
    label = metrics.function_label(context["function"], known)
    metrics.CALLS.labels(label, result.outcome.value).inc()
    metrics.CALL_DURATION.labels(label).observe(elapsed)
    size = len(result.output) if isinstance(result.output, str) else len(result.error or "")
    fields = {
        "outcome": result.outcome.value,
        "elapsed_ms": round(elapsed * 1000, 1),
        "output_chars": size,
    }
    log.info("%s call %s", where(context), result.outcome.value, extra={**context, **fields})


def poison(name: str, attempts: int) -> CallResult:
    """The result of a call whose every delivery ended with its worker process dying."""
    return CallResult.fail(
        Outcome.POISON,
        f"Function {name!r} did not complete in {attempts} attempts: its worker stopped each "
        "time (crash, kill or out of memory); giving up",
    )


def _produce(
    name: str, arguments: Any, attempts: int, registry: Registry, context: dict[str, Any]
) -> CallResult:
    tool = registry.get(name)
    if tool is None:
        log.warning("%s unknown function", where(context), extra=context)
        return unknown_function(registry, name)
    args = parse_arguments(tool, arguments, context)
    if isinstance(args, CallResult):
        return args
    if attempts > 1 and not tool.idempotent:
        log.warning(
            "%s interrupted earlier (attempt %d); reconciling",
            where(context),
            attempts,
            extra=context,
        )
        reconciled = run_reconcile(tool, args, context)
        if reconciled is not None:
            return reconciled
    return run_call(tool, args, context)


def result_payload(ref: CallRef, name: str, result: CallResult) -> dict[str, Any]:
    """The JSON the task returns: the call's identity plus its result."""
    return {
        "session_id": ref.session_id,
        "turn_id": ref.turn_id,
        "call_id": ref.call_id,
        "name": name,
        **result.to_json_dict(),
    }


@app.task(name=EXECUTE_TASK, bind=True, max_retries=LEDGER_RETRIES)
def execute(
    self: Task[Any, Any], session_id: str, turn_id: str, call_id: str, name: str, arguments: Any
) -> dict[str, Any]:
    """Run one function call of a session; returns its result, never raises."""
    ref = CallRef(session_id, turn_id, call_id)
    try:
        result = execute_call(ref, name, arguments, get_ledger(), load_registry())
    except LedgerError as exc:
        if self.request.retries < LEDGER_RETRIES:
            raise self.retry(countdown=2**self.request.retries, exc=exc) from exc
        log.error("session_id=%s call_id=%s giving up: %s", session_id, call_id, exc)
        result = CallResult.fail(
            Outcome.EXCEPTION, "toolfan could not record this call; retry later"
        )
    return result_payload(ref, name, result)


def call_signature(
    session_id: str, turn_id: str, call_id: str, name: str, arguments: Any
) -> Signature[Any]:
    """A routed ``execute`` signature: on its tool's queue, with its tool's hard time limit.

    Its ``argsrepr``, what task events and so Flower show, names the call but leaves out
    the argument values: they stay out of monitoring as they stay out of INFO logs, and
    Celery need not build a repr of every call's arguments when it publishes.
    """
    registry = load_registry()
    options: dict[str, Any] = {
        "queue": execute_queue(registry, name),
        "time_limit": _hard_limit(registry, name),
        "argsrepr": f"({session_id!r}, {turn_id!r}, {call_id!r}, {name!r}, {HIDDEN})",
        "kwargsrepr": "{}",
    }
    return execute.si(session_id, turn_id, call_id, name, arguments).set(**options)
