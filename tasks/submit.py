"""The ``submit`` chord callback: all of a batch's results in one delivery, once.

The engine's half of delivery; the protocol's half is the batch's source
(:mod:`tasks.sources`), which sends the results and says how it went in the engine's own
vocabulary (:mod:`tasks.delivery`). Every resend of the same batch carries the same key
(where the protocol takes one), so the remote side applies it at most once. The ledger
records the outcome: submitted calls are never dispatched again, even while the remote side
still lists them as pending.

What the source says decides what happens to the batch:

* delivered: the calls are marked submitted;
* refused, naming one result: that one result is replaced by an error saying so (in the
  ledger too, so a resubmission sends the same thing) and the batch goes again; good
  results are never given up for a neighbour;
* refused for good otherwise (the batch's content, a batch that is gone): abandoned;
* misconfigured (a refused key, a wrong URL, DNS, TLS): nothing is abandoned; the submit
  retries, and the claim's lease brings the batch back to the next poll, until an operator
  fixes the setting (``toolfan check`` says which);
* retry later: retried with the same key.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from celery import Task

from handlers.result import CallResult, Outcome
from handlers.text import clip, shown
from tasks import metrics, sources
from tasks.app import app
from tasks.delivery import DeliveryError, Misconfigured, Refused, RetryLater
from tasks.envelope import Delivery
from tasks.ledger import CallRef, Ledger, LedgerError
from tasks.queues import SUBMIT_TASK
from tasks.runtime import batch_label, get_ledger
from tasks.settings import get_settings, load_registry

log = logging.getLogger("toolfan.submit")

#: The last answer for a result the API refused even with an explanation.
REFUSED_PLAIN = "The function's result was refused by the API."
#: The source of a submit sent by a version that named none.
DEFAULT_SOURCE = "agents"
#: Options of every task a dispatch sends. The ledger keeps each call's result, and the
#: chord hands the header's results to ``submit`` whether or not the backend stores them,
#: so storing them again (a SETEX and a PUBLISH per task) would be work nobody reads.
UNSTORED: dict[str, Any] = {"ignore_result": True}


class Submitted(StrEnum):
    """How a submit ended."""

    ACCEPTED = "accepted"
    ABANDONED = "abandoned"
    MISMATCH = "mismatch"
    CLAIM_LOST = "claim_lost"
    GAVE_UP = "gave_up"


def match_results(
    calls: Sequence[Sequence[str]], results: Sequence[Mapping[str, Any]]
) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The results by (turn, call), when they cover exactly the claimed calls, else None."""
    by_call = {(r["turn_id"], r["call_id"]): dict(r) for r in results}
    wanted = {(turn, call) for turn, call in calls}
    if len(by_call) != len(results) or set(by_call) != wanted or len(wanted) != len(calls):
        return None
    return by_call


def submit_results(
    session_id: str,
    token: str,
    calls: Sequence[Sequence[str]],
    results: Sequence[Mapping[str, Any]],
    ledger: Ledger,
    source: sources.Source,
    lease_ms: int,
) -> Submitted:
    """Deliver one batch's results through its source and record the outcome in the ledger.

    Raises:
        RetryLater: the batch was not taken yet; retry with the same key.
        Misconfigured: toolfan's settings are wrong; retry once they are fixed.
        LedgerError: the ledger is unreachable; retry.
    """
    ids = f"session_id={shown(session_id)}"
    if not ledger.reclaim(session_id, token, lease_ms):
        log.warning("%s claim passed to another dispatch; it will submit", ids)
        return Submitted.CLAIM_LOST
    by_call = match_results(calls, results)
    if by_call is None:
        log.error("%s results do not match the claimed calls; the next poll redoes it", ids)
        ledger.release(session_id, token)
        return Submitted.MISMATCH
    batch = _Batch(session_id, token, by_call, ledger, source)
    return batch.deliver()


class _Batch:
    """One batch's results on their way: sent, isolated, sent again, then recorded."""

    def __init__(
        self,
        session_id: str,
        token: str,
        by_call: dict[tuple[str, str], dict[str, Any]],
        ledger: Ledger,
        source: sources.Source,
    ) -> None:
        self.session_id = session_id
        self.token = token
        self.by_call = by_call
        self.ledger = ledger
        self.source = source
        self.refs = [CallRef(session_id, turn, call) for turn, call in by_call]
        self.ids = f"session_id={shown(session_id)}"

    def deliver(self) -> Submitted:
        """Send until delivered or refused for good (bounded: each result is replaced twice)."""
        for _ in range(2 * len(self.by_call) + 1):
            pairs = list(self.by_call)
            try:
                delivered = self.source.deliver(self.session_id, list(self.by_call.values()))
            except Refused as exc:
                metrics.SUBMIT_ATTEMPTS.labels(exc.status).inc()
                if exc.item is not None and self._isolate(exc, pairs[exc.item]):
                    continue
                return self._abandon(exc.message, exc.key)
            except Misconfigured as exc:
                metrics.SUBMIT_ATTEMPTS.labels(exc.status).inc()
                _count_config_error(exc)
                raise
            except RetryLater:
                metrics.SUBMIT_ATTEMPTS.labels("retry").inc()
                raise
            metrics.SUBMIT_ATTEMPTS.labels(delivered.status).inc()
            self.ledger.mark_submitted(self.session_id, self.token, self.refs, delivered.key)
            log.info("%s key=%s submitted %d result(s)", self.ids, delivered.key, delivered.count)
            return Submitted.ACCEPTED
        return self._abandon("every result was refused", "")

    def _isolate(self, exc: Refused, pair: tuple[str, str]) -> bool:
        """Replace the one result the refusal names; False once even its error was refused."""
        result = self.by_call[pair]
        replacement = _replacement(result, exc.message)
        if replacement is None:
            return False
        ref = CallRef(self.session_id, *pair)
        self.ledger.replace(ref, replacement, clip(exc.message, 500))
        self.by_call[pair] = {**_identity(result), **replacement.to_json_dict()}
        metrics.REFUSED_RESULTS.inc()
        log.warning(
            "%s turn_id=%s call_id=%s the API refused this result; sending the batch again "
            "with an error in its place: %s",
            self.ids,
            shown(pair[0]),
            shown(pair[1]),
            exc.message,
        )
        return True

    def _abandon(self, reason: str, key: str) -> Submitted:
        log.error("%s key=%s batch refused for good: %s", self.ids, key, reason)
        self.ledger.mark_abandoned(self.refs, clip(reason, 2000))
        self.ledger.release(self.session_id, self.token)
        _count_abandoned(list(self.by_call.values()))
        return Submitted.ABANDONED


def _replacement(result: Mapping[str, Any], reason: str) -> CallResult | None:
    """The error to send in place of a refused result, or None once even that was refused."""
    if result.get("outcome") != Outcome.REFUSED.value:
        return CallResult.fail(
            Outcome.REFUSED,
            f"The function ran, but the API refused its result ({clip(reason, 300)}); "
            "this error was sent in its place.",
        )
    if result.get("error") != REFUSED_PLAIN:
        return CallResult.fail(Outcome.REFUSED, REFUSED_PLAIN)
    return None


def _identity(result: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("batch_id", "turn_id", "call_id", "name")
    return {k: result[k] for k in keep if k in result}


def _count_config_error(exc: Misconfigured) -> None:
    metrics.CONFIG_ERRORS.labels(exc.kind).inc()
    log.error("the API cannot be used as configured (check %s): %s", exc.setting, exc.message)


def _count_abandoned(results: Sequence[Mapping[str, Any]]) -> None:
    known = load_registry()
    for result in results:
        name = result.get("name", "")
        label = metrics.function_label(name, name in known)
        metrics.CALLS.labels(label, "abandoned").inc()
    metrics.ABANDONED.inc(len(results))


def submit_reprs(batch_id: str, calls: int, source: str = DEFAULT_SOURCE) -> dict[str, Any]:
    """What task events (Flower) show of a submit: the source, the batch and a count.

    Never the results' values or the claim's token.
    """
    batch = repr(batch_id) if len(batch_id) <= 80 else repr(batch_id[:77] + "...")
    shown = f"'source': {source!r}, 'batch_id': {batch}, 'calls': {calls}, 'token': <hidden>"
    return {
        "argsrepr": f"(<results of {calls} call(s)>)",
        "kwargsrepr": f"{{'batch': {{{shown}}}}}",
    }


@app.task(name=SUBMIT_TASK, bind=True, max_retries=None)
def submit(
    self: Task[Any, Any],
    /,
    results: list[dict[str, Any]],
    batch: Mapping[str, Any] | None = None,
    saved: list[dict[str, Any]] | None = None,
    **legacy: Any,
) -> str:
    """Chord callback: deliver a batch's results (header results plus ``saved`` ones).

    ``batch`` is the :class:`~tasks.envelope.Delivery`; a message of the version before
    envelopes names its fields one by one (``session_id``, ``token``, ...), still read.
    """
    delivery = Delivery.from_wire(batch if batch is not None else _legacy(legacy))
    session_id, source, calls = delivery.batch_id, delivery.source, delivery.calls
    try:
        outcome = _submit(delivery, [*(saved or []), *results])
    except (DeliveryError, sources.UnknownSource, LedgerError) as exc:
        limit = get_settings().submit_retries
        sid = shown(session_id)
        if self.request.retries >= limit:
            log.error(
                "session_id=%s giving up after %d retries: %s; the claim will expire "
                "and a later poll resubmits",
                sid,
                limit,
                exc,
            )
            return Submitted.GAVE_UP.value
        if isinstance(exc, sources.UnknownSource):
            log.error("session_id=%s cannot be delivered by this worker: %s", sid, exc)
        delay = min(60.0, 2.0**self.request.retries) * random.uniform(0.5, 1.0)  # noqa: S311
        retry = self.request.retries + 1
        log.warning("session_id=%s submit retry %d in %.1fs: %s", sid, retry, delay, exc)
        reprs = submit_reprs(session_id, len(calls), source)  # or a retry shows every value
        raise self.retry(countdown=delay, exc=exc, **reprs) from exc
    return outcome.value


def deliver_here(batch: Mapping[str, Any], results: list[dict[str, Any]]) -> None:
    """Deliver a batch of one call in the worker that ran it, or hand it to ``submit``.

    A source that delivers cheaply (:func:`tasks.runtime.delivers_in_place`) spares its
    one-call batches the chord and the ``submit`` task: two broker hops, most of such a
    batch's time. Whatever stops the delivery here (the ledger, the source, a bug) is
    left to a ``submit`` task, which retries it exactly as if the chord had sent it; so
    this never raises, and the call's worker is not held by a delivery that must wait.
    """
    try:
        delivery = Delivery.from_wire(batch)
    except Exception as exc:  # only a foreign message; the claim's lease brings it back
        log.error("a delivery in place had an unreadable envelope: %s", exc)
        return
    try:
        _submit(delivery, results)
    except Exception as exc:
        log.warning(
            "%s=%s not delivered in place (%s); a submit task takes it on",
            batch_label(delivery.source),
            shown(delivery.batch_id),
            exc,
        )
        _hand_on(delivery, results)


def _hand_on(delivery: Delivery, results: list[dict[str, Any]]) -> None:
    reprs = submit_reprs(delivery.batch_id, len(delivery.calls), delivery.source)
    body = submit.s(batch=delivery.to_wire(), saved=[]).set(**UNSTORED, **reprs)
    try:
        body.apply_async(args=(results,))
    except Exception as exc:  # the broker is down too: the claim's lease brings it back
        log.error(
            "%s=%s the submit could not be sent either (%s); the batch is redone once its "
            "claim expires",
            batch_label(delivery.source),
            shown(delivery.batch_id),
            exc,
        )


def _submit(delivery: Delivery, results: list[dict[str, Any]]) -> Submitted:
    """Deliver through the batch's source; the time-to-submit metric counts accepted ones."""
    source = delivery.source
    outcome = submit_results(
        delivery.batch_id,
        delivery.token,
        delivery.calls,
        results,
        get_ledger(source),
        sources.get(source),
        delivery.lease_ms,
    )
    if outcome is Submitted.ACCEPTED and delivery.first_seen is not None:
        metrics.TIME_TO_SUBMIT.observe(max(0.0, time.time() - delivery.first_seen))
    return outcome


def _legacy(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The delivery envelope of a submit written before envelopes (an Agents session's)."""
    return {
        "source": fields.get("source", DEFAULT_SOURCE),
        "batch_id": fields.get("session_id"),
        "token": fields.get("token"),
        "calls": fields.get("calls", []),
        "lease_ms": fields.get("lease_ms"),
        "first_seen": fields.get("first_seen"),
    }
