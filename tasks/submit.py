"""The ``submit`` chord callback: all of a session's results in one events batch, once.

The batch carries an ``Idempotency-Key`` derived from the session and its sorted call ids,
so every retry (by the client, by Celery, or by a later poll after a crash) sends the same
key and the API applies the batch at most once. The ledger records the outcome: submitted
calls are never dispatched again, even while the API still lists them as pending.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Sequence
from enum import StrEnum
from functools import cache
from typing import Any

import httpx
from celery import Task

from dispatcher.client import AgentsClient
from dispatcher.errors import FinalAPIError, RetryableAPIError
from dispatcher.models import tool_result_event
from tasks import metrics
from tasks.app import app
from tasks.execute import get_ledger
from tasks.ledger import CallRef, Ledger, LedgerError
from tasks.queues import SUBMIT_TASK
from tasks.settings import get_settings, load_registry

log = logging.getLogger("toolfan.submit")


class Submitted(StrEnum):
    """How a submit ended."""

    ACCEPTED = "accepted"
    ABANDONED = "abandoned"
    MISMATCH = "mismatch"
    CLAIM_LOST = "claim_lost"
    GAVE_UP = "gave_up"


@cache
def get_client() -> AgentsClient:
    """The API client of this process (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""
    timeout = get_settings().api_timeout
    return AgentsClient(timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)))


def idempotency_key(session_id: str, calls: Sequence[Sequence[str]]) -> str:
    """The batch key: the same session and set of (turn, call) pairs give the same key."""
    pairs = "\n".join(f"{turn}\t{call}" for turn, call in sorted(tuple(c) for c in calls))
    digest = hashlib.sha256(f"{session_id}\n{pairs}".encode()).hexdigest()
    return f"toolfan-{digest[:40]}"


def build_events(
    calls: Sequence[Sequence[str]], results: Sequence[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """One tool_result event per claimed call, in claim order; None if results don't match."""
    by_call = {(r["turn_id"], r["call_id"]): r for r in results}
    wanted = [(turn, call) for turn, call in calls]
    if len(by_call) != len(results) or set(by_call) != set(wanted):
        return None
    return [_event(by_call[pair]) for pair in wanted]


def _event(result: dict[str, Any]) -> dict[str, Any]:
    return tool_result_event(
        result["turn_id"],
        result["call_id"],
        success=bool(result["success"]),
        output=result.get("output"),
        error=result.get("error"),
    )


def submit_results(
    session_id: str,
    token: str,
    calls: Sequence[Sequence[str]],
    results: Sequence[dict[str, Any]],
    ledger: Ledger,
    client: AgentsClient,
    lease_ms: int,
) -> Submitted:
    """Send one session's results in one batch and record the outcome in the ledger.

    Raises:
        RetryableAPIError: the API did not take the batch yet; retry with the same key.
        LedgerError: the ledger is unreachable; retry.
    """
    ids = f"session_id={session_id}"
    refs = [CallRef(session_id, turn, call) for turn, call in calls]
    if not ledger.reclaim(session_id, token, lease_ms):
        log.warning("%s claim passed to another dispatch; it will submit", ids)
        return Submitted.CLAIM_LOST
    events = build_events(calls, results)
    if events is None:
        log.error("%s results do not match the claimed calls; the next poll redoes it", ids)
        ledger.release(session_id, token)
        return Submitted.MISMATCH
    key = idempotency_key(session_id, calls)
    try:
        accepted = client.submit_events(session_id, events, key)
    except FinalAPIError as exc:
        _count_attempt(str(exc.status_code or "final"))
        log.error("%s key=%s batch refused for good: %s", ids, key, exc.message)
        ledger.mark_abandoned(refs, exc.message)
        ledger.release(session_id, token)
        _count_abandoned(results)
        return Submitted.ABANDONED
    except RetryableAPIError:
        _count_attempt("retry")
        raise
    _count_attempt(str(accepted.status_code))
    ledger.mark_submitted(session_id, token, refs, key)
    log.info("%s key=%s submitted %d result(s)", ids, key, len(events))
    return Submitted.ACCEPTED


def _count_attempt(status: str) -> None:
    metrics.SUBMIT_ATTEMPTS.labels(status).inc()


def _count_abandoned(results: Sequence[dict[str, Any]]) -> None:
    known = load_registry()
    for result in results:
        label = metrics.function_label(result["name"], result["name"] in known)
        metrics.CALLS.labels(label, "abandoned").inc()
    metrics.ABANDONED.inc(len(results))


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
    except (RetryableAPIError, LedgerError) as exc:
        limit = get_settings().submit_retries
        if self.request.retries >= limit:
            log.error(
                "session_id=%s giving up after %d retries: %s; the claim will expire "
                "and a later poll resubmits with the same key",
                session_id,
                limit,
                exc,
            )
            return Submitted.GAVE_UP.value
        delay = min(60.0, 2.0**self.request.retries) * random.uniform(0.5, 1.0)  # noqa: S311
        log.warning(
            "session_id=%s submit retry %d in %.1fs: %s",
            session_id,
            self.request.retries + 1,
            delay,
            exc,
        )
        raise self.retry(countdown=delay, exc=exc) from exc
    if outcome is Submitted.ACCEPTED and first_seen is not None:
        metrics.TIME_TO_SUBMIT.observe(max(0.0, time.time() - first_seen))
    return outcome.value
