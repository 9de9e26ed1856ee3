"""The ``execute`` task: run one function call at most once, and always return a result.

The plain function :func:`execute_call` holds the logic and is tested without Celery; the
task is a thin wrapper. It never raises: a raised exception in a chord header means the
callback never runs, so the session's other results would wait for a lease to run out,
the call would run again, and would finally be answered as poison. So a guard at the
task's edge turns anything the tool, the parser or the serializer throws (recursion,
encoding, ``MemoryError``) into a failed result with an honest message; only the death of
the worker process reaches the poison path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from celery import Task, states
from celery.canvas import Signature
from pydantic import BaseModel

from handlers.context import CallContext
from handlers.policy import Deny, RequireApproval, decide
from handlers.registry import Registry
from handlers.result import CallResult, Outcome
from handlers.runner import (
    failed,
    invalid_arguments,
    parse_arguments,
    run_call,
    run_reconcile,
    safe_str,
    unknown_function,
    where,
)
from handlers.text import shown
from handlers.tool import Tool
from tasks import liveness, metrics
from tasks.app import app
from tasks.approvals import AwaitingApproval, gate
from tasks.config import hard_limit
from tasks.context import context_of
from tasks.envelope import Envelope
from tasks.join import JOIN, JoiningRedisBackend, counted, joinable
from tasks.ledger import NOT_RUN, Begin, CallRef, Ledger, LedgerError
from tasks.queues import EXECUTE_TASK, execute_queue
from tasks.runtime import call_ids, get_approvals, get_ledger, get_limits, get_policy
from tasks.settings import get_settings, load_registry
from tasks.submit import deliver_here

log = logging.getLogger("toolfan.execute")

#: What saves a call's result: the saved result (the first one saved wins).
Saver = Callable[[CallResult], CallResult]

LEDGER_RETRIES = 5
#: Seconds allowed for answering a call to an unregistered function.
UNKNOWN_TOOL_TIMEOUT = 10.0
#: What task events and Flower show in place of a call's argument values.
HIDDEN = "<arguments hidden>"
#: Seconds kept free before the task's hard time limit while saving a result.
SAVE_MARGIN = 0.5
#: First and longest pause between attempts to save a result while the ledger is down.
SAVE_BACKOFF = (0.05, 1.0)


def execute_call(
    ref: CallRef,
    name: str,
    arguments: Any,
    ledger: Ledger,
    registry: Registry,
    problem: str | None = None,
    worker: str = "",
    envelope: Envelope | None = None,
    saver: Saver | None = None,
) -> CallResult:
    """Run one call unless the ledger already holds its result; save and return the result.

    ``problem`` says why the poller refused the call's arguments unread (too deep, too
    large): the call is answered with that, and no tool runs. ``worker`` names this worker
    in the call's record, so a redelivered copy can tell the call still runs there.
    ``envelope`` is the message's, for the tool's :class:`~handlers.context.CallContext`
    (without it, the context has the call's ids only). ``saver`` saves the result in place
    of :meth:`Ledger.finish <tasks.ledger.Ledger.finish>` (see :func:`_joining_saver`).

    Raises:
        LedgerError: the ledger is unreachable, so "at most once" cannot be guaranteed;
            the caller retries later rather than run the function unrecorded.
    """
    context = call_ids(ledger.source, ref, name)
    begin = ledger.begin(ref, name, worker)
    if begin.ended is not None:
        log.info("%s not run: %s", where(context), begin.ended, extra=context)
        return CallResult.fail(Outcome.CANCELLED, f"Not run: {begin.ended}")
    if begin.saved is not None:
        log.info("%s returning saved result", where(context), extra=context)
        return begin.saved
    elsewhere = _running_elsewhere(ledger, ref, begin, worker, _hard_limit(registry, name))
    if elsewhere is not None:
        return elsewhere
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
        if envelope is None:
            envelope = Envelope(
                ledger.source, ref.batch_id, ref.call_id, name, arguments, ref.turn_id
            )
        call = context_of(envelope, begin.attempts)
        try:
            produced = _produce(name, arguments, begin.attempts, registry, context, problem, call)
        except AwaitingApproval:
            ledger.park(ref, worker)  # the wait is no attempt, and holds no process
            raise
    elapsed = time.perf_counter() - started
    deadline = started + _hard_limit(registry, name) - SAVE_MARGIN
    result = save_result(ledger, ref, produced, deadline, context, saver)
    _report(result, elapsed, name in registry, context)
    return result


#: Seconds between looks at the ledger while a call runs on another, live worker.
ELSEWHERE_POLL = 0.5


def _running_elsewhere(
    ledger: Ledger, ref: CallRef, begin: Begin, worker: str, hard_limit: float
) -> CallResult | None:
    """The result of a call another live worker runs, waited for; None to run it here.

    A broker may redeliver a message while the call still runs (RabbitMQ does when the
    consumer's connection drops): running it again would make two live copies. So this
    copy waits for that worker's result, and runs the call only if the worker dies first
    (or this task's own time runs out: the other one's hard limit has passed by then).
    """
    previous = begin.previous_worker
    if begin.attempts < 2 or not previous or previous == worker:
        return None
    dead_after = get_settings().dead_after
    deadline = time.monotonic() + hard_limit - 4 * SAVE_MARGIN
    while liveness.runs(ledger.client, previous, worker, dead_after) and (
        time.monotonic() < deadline
    ):
        saved = ledger.saved(ref)
        if saved is not None:
            log.info(
                "%s answered by %s, which ran it", where(call_ids(ledger.source, ref, "")), previous
            )
            return saved
        time.sleep(ELSEWHERE_POLL)
    return ledger.saved(ref)


def save_result(
    ledger: Ledger,
    ref: CallRef,
    produced: CallResult,
    deadline: float,
    context: dict[str, Any],
    saver: Saver | None = None,
) -> CallResult:
    """Save ``produced``, retrying while the ledger is down until ``deadline`` (perf_counter).

    The result exists only in this process once the function has run: giving up at the
    first failed write would make the redelivered task run the function again. FINISH keeps
    the first saved result, so repeating it after a lost reply is harmless (and so is the
    chord's count that ``saver`` may make with it: a part is counted once by its index).

    Raises:
        LedgerError: the ledger stayed unreachable until the deadline.
    """
    pause, longest = SAVE_BACKOFF
    while True:
        try:
            return saver(produced) if saver is not None else ledger.finish(ref, produced)
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
    name: str,
    arguments: Any,
    attempts: int,
    registry: Registry,
    context: dict[str, Any],
    problem: str | None,
    call: CallContext,
) -> CallResult:
    limits = get_limits()
    tool = registry.get(name)
    if tool is None:
        log.warning("%s unknown function", where(context), extra=context)
        return unknown_function(registry, name, limits)
    if problem is not None:
        return invalid_arguments(tool.name, problem, context, limits)
    args = parse_arguments(tool, arguments, context, limits)
    if isinstance(args, CallResult):
        return args
    refused = _authorize(tool, args, call, context)
    if refused is not None:
        return refused
    if attempts > 1 and not tool.idempotent:
        log.warning(
            "%s interrupted earlier (attempt %d); reconciling",
            where(context),
            attempts,
            extra=context,
        )
        reconciled = run_reconcile(tool, args, context, limits, call)
        if reconciled is not None:
            return reconciled
    return run_call(tool, args, context, limits, call)


def _authorize(
    tool: Tool[Any, Any], args: BaseModel, call: CallContext, context: dict[str, Any]
) -> CallResult | None:
    """The answer of a call that may not run now; None when it may.

    Its policy (the tool's own, else ``TOOLFAN_POLICY``) decides first; a call that needs
    an approval (``requires_approval=True``, or the policy's ``RequireApproval``) runs once
    approved with these very arguments.

    Raises:
        AwaitingApproval: the call waits for a person's decision.
    """
    policy = tool.authorize or get_policy()
    if policy is None and not tool.requires_approval:
        return None  # the common case: nothing to decide, and no arguments dumped for it
    values = args.model_dump(mode="json", by_alias=True)
    decision = decide(policy, tool.name, values, call) if policy is not None else None
    if isinstance(decision, Deny):
        log.warning(
            "%s denied: %s",
            where(context),
            shown(decision.reason),
            extra={**context, "outcome": Outcome.DENIED.value},
        )
        return failed(Outcome.DENIED, f"Not authorized: {decision.reason}", get_limits())
    if not (tool.requires_approval or isinstance(decision, RequireApproval)):
        return None
    reason = decision.reason if isinstance(decision, RequireApproval) else "the tool requires it"
    settings = get_settings()
    store = get_approvals()
    return gate(store, call, values, reason, settings.approval_timeout, settings.expiry_margin)


def crashed(name: str, exc: BaseException) -> CallResult:
    """The result of a call whose handling raised where nothing should have."""
    return failed(
        Outcome.EXCEPTION,
        f"toolfan could not handle the call to {name[:200]!r}: {type(exc).__name__}: "
        f"{safe_str(exc)}",
        get_limits(),
    )


def result_payload(ref: CallRef, name: str, result: CallResult) -> dict[str, Any]:
    """The JSON the task returns: the call's identity plus its result."""
    return {
        "batch_id": ref.batch_id,
        "turn_id": ref.turn_id,
        "call_id": ref.call_id,
        "name": name,
        **result.to_json_dict(),
    }


class Payload(Mapping[str, Any]):
    """A task's JSON result whose repr, what Flower shows, leaves out output values.

    Celery reports a task's return value to Flower as its repr (walking the items of a
    real dict, so this is a mapping, not a dict); the chord and the result backend get the
    JSON, which kombu's encoder takes from ``__json__``.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __json__(self) -> dict[str, Any]:
        return self._data

    def __repr__(self) -> str:
        size = len(self.get("output") or self.get("error") or "")
        return (
            f"<result call_id={_clipped(self.get('call_id'))} outcome={self.get('outcome')} "
            f"{'output' if self.get('success') else 'error'}_chars={size}>"
        )


def _clipped(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


@app.task(name=EXECUTE_TASK, bind=True, max_retries=LEDGER_RETRIES)
def execute(
    self: Task[Any, Any],
    *legacy: Any,
    call: Mapping[str, Any] | None = None,
    deliver: Mapping[str, Any] | None = None,
) -> Mapping[str, Any]:
    """Run one call (its :class:`Envelope` in ``call``); returns its result, never raises.

    ``deliver``, the :class:`~tasks.envelope.Delivery` of a batch of this one call, makes
    this task deliver the batch itself (no chord, no ``submit``: see
    :func:`tasks.submit.deliver_here`). Positional arguments are the message of the
    version before envelopes, still read so that messages queued across an upgrade run.
    """
    envelope = Envelope.from_wire(call) if call is not None else Envelope.from_legacy(legacy)
    ref, name = envelope.ref, envelope.name
    ledger = get_ledger(envelope.source)
    worker = liveness.runner(self.request.hostname or "")
    try:
        result = execute_call(
            ref,
            name,
            envelope.arguments,
            ledger,
            load_registry(),
            envelope.problem,
            worker,
            envelope,
            _joining_saver(self, ledger, ref, name),
        )
    except AwaitingApproval as waiting:
        _keep_claim(ledger, envelope, waiting)
        raise self.retry(
            countdown=waiting.seconds, max_retries=WAIT_RETRIES, **call_reprs(envelope)
        ) from None
    except LedgerError as exc:
        if self.request.retries < LEDGER_RETRIES:
            reprs = call_reprs(envelope)  # or Flower shows values
            raise self.retry(countdown=2**self.request.retries, exc=exc, **reprs) from exc
        ids = call_ids(ledger.source, ref, name)
        log.error("%s giving up: %s", where(ids), exc, extra=ids)
        result = CallResult.fail(
            Outcome.EXCEPTION, "toolfan could not record this call; retry later"
        )
    except (Exception, RecursionError, MemoryError) as exc:
        result = _guarded(ledger, ref, name, exc)
    payload = result_payload(ref, name, result)
    if deliver is not None:
        deliver_here(deliver, [payload])
    return Payload(payload)


def _joining_saver(task: Task[Any, Any], ledger: Ledger, ref: CallRef, name: str) -> Saver | None:
    """Save a chord part's result and count it in its chord in one round trip, if it can be.

    A call's result is written twice on its way: into the ledger (the record that answers
    a redelivered copy) and, once the task returns, into its chord's results, which the
    last part sends on. Where both live on one Redis (the default: ``TOOLFAN_REDIS_URL``
    for both), one script does both: a Redis round trip less per call, the priciest step
    of a call on a threads pool, where each round trip is a hand-over of the interpreter
    among the pool's threads. The task then returns the same result as before, and the
    result backend, finding the part counted, only sends the callback if it was the last
    (see :mod:`tasks.join`). None where the two are apart, or the call is no chord's part:
    the ledger's FINISH alone, and the backend counts the part as before.
    """
    request = task.request
    if not joinable(task.backend, request, ledger.client):
        return None
    backend = cast(JoiningRedisBackend, task.backend)

    def save(result: CallResult) -> CallResult:
        value = Payload(result_payload(ref, name, result))
        keys, args = backend.join_of(request, states.SUCCESS, value)
        saved, members = ledger.finish_then(ref, result, JOIN, keys, args)
        if members is not NOT_RUN:  # counted: its payload is the one the task returns
            counted(request, keys, members)
        return saved

    return save


#: Retries a task may make while its call waits for approval (the deadline ends the wait).
WAIT_RETRIES = 10**9


def _keep_claim(ledger: Ledger, envelope: Envelope, waiting: AwaitingApproval) -> None:
    """Hold the batch's claim while its call waits, so no poll dispatches it again."""
    left = waiting.approval.seconds_left()
    run = _hard_limit(load_registry(), envelope.name) + 2 * waiting.seconds
    budget = left + run + get_settings().queue_budget  # as a dispatch's lease counts it
    ledger.extend_claim(envelope.batch_id, int(budget * 1000))


def _guarded(ledger: Ledger, ref: CallRef, name: str, exc: BaseException) -> CallResult:
    """Answer a call whose handling raised, saving that answer when the ledger takes it."""
    ids = call_ids(ledger.source, ref, name)
    log.error("%s handling the call raised", where(ids), exc_info=True, extra=ids)
    result = crashed(name, exc)
    try:
        return ledger.finish(ref, result)
    except Exception:  # the answer still goes out; a redelivery would give the same one
        log.error("%s the failed result could not be saved", where(ids), extra=ids)
        return result


def call_reprs(envelope: Envelope) -> dict[str, Any]:
    """What task events (Flower) show of an ``execute``: the ids, never argument values."""
    ids = (envelope.source, envelope.batch_id, envelope.turn_id, envelope.call_id)
    shown = ", ".join(_clipped(v) for v in (*ids, envelope.name))
    return {"argsrepr": "()", "kwargsrepr": f"{{'call': ({shown}, {HIDDEN})}}"}


def call_signature(envelope: Envelope, deliver: Mapping[str, Any] | None = None) -> Signature[Any]:
    """A routed ``execute`` signature: on its tool's queue, with its tool's hard time limit.

    Given ``deliver`` (a one-call batch's delivery envelope), the task delivers the batch
    itself. Its ``kwargsrepr``, what task events and so Flower show, names the call but
    leaves out the argument values and the claim's token: they stay out of monitoring as
    they stay out of INFO logs, and Celery need not build a repr of every call's arguments
    when it publishes.
    """
    registry = load_registry()
    options: dict[str, Any] = {
        "queue": execute_queue(registry, envelope.name),
        "time_limit": _hard_limit(registry, envelope.name),
        **call_reprs(envelope),
    }
    if deliver is None:
        return execute.si(call=envelope.to_wire()).set(**options)
    return execute.si(call=envelope.to_wire(), deliver=dict(deliver)).set(**options)
