"""The ``submit`` chord callback: all of a session's results in one events batch, once.

The batch carries an ``Idempotency-Key`` derived from the session and the exact body
(:mod:`tasks.batch`), so every retry (by the client, by Celery, or by a later poll after a
crash) sends the same key and the API applies the batch at most once. The ledger records
the outcome: submitted calls are never dispatched again, even while the API still lists
them as pending.

What the API says decides what happens to the batch:

* accepted: the calls are marked submitted;
* a refusal naming one event (``param: events[i]...``): that one result is replaced by an
  error saying so (in the ledger too, so a resubmission sends the same thing) and the batch
  goes again; good results are never given up for a neighbour;
* any other refusal of the batch's content (400, 409, a session that is gone): abandoned;
* a configuration error (a refused key, a wrong URL, DNS, TLS): nothing is abandoned; the
  submit retries, and the claim's lease brings the session back to the next poll, until an
  operator fixes the setting (``toolfan check`` says which);
* a transient failure: retried with the same key.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Mapping, Sequence
from enum import StrEnum
from functools import cache
from typing import Any

import httpx
from celery import Task

from dispatcher.client import AgentsClient
from dispatcher.errors import (
    APIError,
    BadRequestError,
    ConfigurationError,
    FinalAPIError,
    NotFoundError,
    RetryableAPIError,
)
from handlers.result import CallResult, Outcome
from handlers.text import clip, shown
from tasks import metrics
from tasks.app import app
from tasks.batch import batch_key, build_body
from tasks.execute import get_ledger
from tasks.ledger import CallRef, Ledger, LedgerError
from tasks.queues import SUBMIT_TASK
from tasks.settings import get_settings, load_registry

log = logging.getLogger("toolfan.submit")

#: Where a refusal names one event of the batch: ``events[3]`` or ``events[3].output[0]``.
_EVENT_PARAM = re.compile(r"events\[(\d+)\]")
#: The last answer for a result the API refused even with an explanation.
REFUSED_PLAIN = "The function's result was refused by the API."


class Submitted(StrEnum):
    """How a submit ended."""

    ACCEPTED = "accepted"
    ABANDONED = "abandoned"
    MISMATCH = "mismatch"
    CLAIM_LOST = "claim_lost"
    GAVE_UP = "gave_up"


class NoRoute(ConfigurationError):
    """The sessions endpoint itself answers 404: the base URL points somewhere else."""


@cache
def get_client() -> AgentsClient:
    """The API client of this process (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""
    settings = get_settings()
    timeout = settings.api_timeout
    return AgentsClient(
        timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)), max_depth=settings.max_depth
    )


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
    client: AgentsClient,
    lease_ms: int,
) -> Submitted:
    """Send one session's results in one batch and record the outcome in the ledger.

    Raises:
        RetryableAPIError: the API did not take the batch yet; retry with the same key.
        ConfigurationError: toolfan's settings are wrong; retry once they are fixed.
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
    batch = _Batch(session_id, token, by_call, ledger, client)
    return batch.deliver()


class _Batch:
    """One session's results on their way: sent, isolated, sent again, then recorded."""

    def __init__(
        self,
        session_id: str,
        token: str,
        by_call: dict[tuple[str, str], dict[str, Any]],
        ledger: Ledger,
        client: AgentsClient,
    ) -> None:
        self.session_id = session_id
        self.token = token
        self.by_call = by_call
        self.ledger = ledger
        self.client = client
        self.refs = [CallRef(session_id, turn, call) for turn, call in by_call]
        self.ids = f"session_id={shown(session_id)}"

    def deliver(self) -> Submitted:
        """Send until accepted or refused for good (bounded: each result is replaced twice)."""
        limit = get_settings().max_batch_bytes
        for _ in range(2 * len(self.by_call) + 1):
            order, body = build_body(list(self.by_call.values()), limit)
            key = batch_key(self.session_id, body)
            try:
                accepted = self.client.submit_body(self.session_id, body, key)
            except BadRequestError as exc:
                _count_attempt(exc)
                if self._isolate(exc, order):
                    continue
                return self._abandon(exc, key)
            except NotFoundError as exc:
                _count_attempt(exc)
                self._probe_route(exc)
                return self._abandon(exc, key)
            except ConfigurationError as exc:
                _count_attempt(exc)
                _count_config_error(exc)
                raise
            except FinalAPIError as exc:
                _count_attempt(exc)
                return self._abandon(exc, key)
            except RetryableAPIError:
                _count_attempt("retry")
                raise
            _count_attempt(str(accepted.status_code))
            self.ledger.mark_submitted(self.session_id, self.token, self.refs, key)
            log.info("%s key=%s submitted %d result(s)", self.ids, key, len(order))
            return Submitted.ACCEPTED
        return self._abandon(BadRequestError("every result was refused"), "")

    def _isolate(self, exc: BadRequestError, order: list[tuple[str, str]]) -> bool:
        """Replace the one result the refusal names; False when it names none or gave up."""
        found = _EVENT_PARAM.search(exc.param or "") or _EVENT_PARAM.search(exc.message)
        index = int(found.group(1)) if found else -1
        if not 0 <= index < len(order):
            return False
        pair = order[index]
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

    def _probe_route(self, exc: NotFoundError) -> None:
        """Tell "this session is gone" from "this URL serves no sessions" (then raise)."""
        try:
            self.client.check_access()
        except (NotFoundError, ConfigurationError) as probe:
            error = NoRoute(
                f"{probe.message}: the sessions endpoint is not there, so OPENAI_BASE_URL "
                "is probably wrong",
                status_code=probe.status_code,
            )
            _count_config_error(error)
            raise error from exc

    def _abandon(self, exc: FinalAPIError, key: str) -> Submitted:
        log.error("%s key=%s batch refused for good: %s", self.ids, key, exc.message)
        self.ledger.mark_abandoned(self.refs, clip(exc.message, 2000))
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
    keep = ("session_id", "turn_id", "call_id", "name")
    return {k: result[k] for k in keep if k in result}


def _count_attempt(outcome: str | APIError) -> None:
    """Count one batch sent, by its HTTP status (``retry``, ``final`` without one)."""
    if isinstance(outcome, APIError):
        outcome = str(outcome.status_code or "final")
    metrics.SUBMIT_ATTEMPTS.labels(outcome).inc()


def _count_config_error(exc: ConfigurationError) -> None:
    metrics.CONFIG_ERRORS.labels(type(exc).__name__).inc()
    log.error("the API cannot be used as configured (check %s): %s", exc.setting, exc.message)


def _count_abandoned(results: Sequence[Mapping[str, Any]]) -> None:
    known = load_registry()
    for result in results:
        name = result.get("name", "")
        label = metrics.function_label(name, name in known)
        metrics.CALLS.labels(label, "abandoned").inc()
    metrics.ABANDONED.inc(len(results))


def submit_reprs(session_id: str, calls: int) -> dict[str, Any]:
    """What task events (Flower) show of a submit: the session and a count.

    Never the results' values or the claim's token.
    """
    session = repr(session_id) if len(session_id) <= 80 else repr(session_id[:77] + "...")
    return {
        "argsrepr": f"(<results of {calls} call(s)>)",
        "kwargsrepr": f"{{'session_id': {session}, 'calls': {calls}, 'token': <hidden>}}",
    }


@app.task(name=SUBMIT_TASK, bind=True, max_retries=None)
def submit(
    self: Task[Any, Any],
    results: list[dict[str, Any]],
    session_id: str,
    token: str,
    calls: list[list[str]],
    lease_ms: int,
    saved: list[dict[str, Any]] | None = None,
    first_seen: float | None = None,
) -> str:
    """Chord callback: submit a session's results (header results plus ``saved`` ones)."""
    try:
        results = [*(saved or []), *results]
        outcome = submit_results(
            session_id, token, calls, results, get_ledger(), get_client(), lease_ms
        )
    except (RetryableAPIError, ConfigurationError, LedgerError) as exc:
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
        delay = min(60.0, 2.0**self.request.retries) * random.uniform(0.5, 1.0)  # noqa: S311
        retry = self.request.retries + 1
        log.warning("session_id=%s submit retry %d in %.1fs: %s", sid, retry, delay, exc)
        reprs = submit_reprs(session_id, len(calls))  # a retry would show every value
        raise self.retry(countdown=delay, exc=exc, **reprs) from exc
    if outcome is Submitted.ACCEPTED and first_seen is not None:
        metrics.TIME_TO_SUBMIT.observe(max(0.0, time.time() - first_seen))
    return outcome.value
