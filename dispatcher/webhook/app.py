"""The intake's ASGI app: the webhook, ``POST /runs/watch``, the approvals, health, metrics.

A delivery is handled in this order, and each step answers for itself:

1. ``401`` before the body is received when the headers alone show it cannot verify (no
   secret set, a signature header missing, the timestamp more than 300 s off);
2. ``413`` for a body over ``TOOLFAN_WEBHOOK_MAX_BYTES`` (read no further than that);
3. ``503`` (``busy``) when the bodies being received on every connection together would go
   over ``TOOLFAN_WEBHOOK_MAX_PENDING_BYTES`` (:mod:`dispatcher.webhook.budget`);
4. ``401`` unless the signature verifies (:mod:`dispatcher.webhook.verify`): nothing of the
   body has been read, and it is never logged;
5. ``400`` for a verified body that is not the event JSON;
6. ``200`` for a duplicate ``webhook-id`` (kept ``TOOLFAN_WEBHOOK_DEDUP_TTL``, 72 h) and for
   events toolfan does not act on;
7. ``202`` once the session's targeted dispatch is queued on ``toolfan.poll``;
8. ``503`` when Redis or the broker cannot take it, so the platform delivers it again
   (the ``webhook-id`` is only kept once the dispatch is queued).

Nothing is dispatched for any answer but ``202``.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dispatcher.sources.assistants_watch import Watches
from dispatcher.webhook.approvals import ApprovalsApi
from dispatcher.webhook.budget import Budget, Hold, OverBudget
from dispatcher.webhook.events import Event, Kind, NotAnEvent, read_event
from dispatcher.webhook.metrics import DELIVERIES, PENDING_BYTES, read_approvals
from dispatcher.webhook.operators import Operators
from dispatcher.webhook.page import Page, is_form, wants_html
from dispatcher.webhook.push import push
from dispatcher.webhook.throttle import Throttle
from dispatcher.webhook.verify import Unverified, check_headers, secrets, verify_checked
from handlers.text import shown
from tasks import keys
from tasks.app import app as celery_app
from tasks.approvals import ApprovalStore
from tasks.settings import WEBHOOK_DEDUP_TTL, WEBHOOK_MAX_PENDING_BYTES, get_settings

log = logging.getLogger("toolfan.webhook")


#: Seconds a client refused for the budget is asked to wait (``Retry-After``).
RETRY_AFTER = 5


class TooLarge(Exception):
    """A body over the intake's limit."""


@dataclass(frozen=True)
class IntakeConfig:
    """What the intake needs, from the environment.

    Attributes:
        client: The ledger's Redis (deduplication, watched runs).
        max_bytes: The largest delivery read.
        secrets: The signing secrets (``OPENAI_WEBHOOK_SECRET``, comma-separated).
        token: The operator endpoints' bearer token (``TOOLFAN_INTAKE_TOKEN``), if set.
        seen_ttl: Seconds a delivery's ``webhook-id`` is remembered
            (``TOOLFAN_WEBHOOK_DEDUP_TTL``; the platform retries for up to 72 h).
        max_pending_bytes: The most bytes of deliveries not yet verified held at once,
            every connection together (``TOOLFAN_WEBHOOK_MAX_PENDING_BYTES``).
    """

    client: redis.Redis
    max_bytes: int
    secrets: tuple[str, ...]
    token: str | None
    seen_ttl: int = WEBHOOK_DEDUP_TTL
    max_pending_bytes: int = WEBHOOK_MAX_PENDING_BYTES


def answer(status: int, outcome: str, event: str = "none", **fields: Any) -> JSONResponse:
    """An answer, counted."""
    DELIVERIES.labels(outcome, event).inc()
    return JSONResponse({"outcome": outcome, **fields}, status_code=status)


async def read_body(request: Request, limit: int, hold: Hold | None = None) -> bytes:
    """The body, never more than ``limit`` bytes of it, each chunk counted in ``hold``.

    Raises:
        TooLarge: the body (or its announced length) is over the limit.
        OverBudget: ``hold``'s budget has no room for the next chunk.
    """
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:
        raise TooLarge
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise TooLarge
        if hold is not None:
            hold.take(len(chunk))
        body += chunk
    return bytes(body)


class Intake:
    """The handlers, over one configuration."""

    def __init__(self, config: IntakeConfig) -> None:
        self.config = config
        self.approvals = ApprovalStore(config.client, get_settings().ledger_ttl)
        self.budget = Budget(config.max_pending_bytes)
        self._busy = Throttle()
        self._unverified = Throttle()

    async def openai(self, request: Request) -> Response:
        """One delivery from the platform (see the module docstring for the order)."""
        received = time.time()
        webhook_id = request.headers.get("webhook-id", "")
        body = await self._verified(request, webhook_id)
        if isinstance(body, Response):
            return body
        try:
            event = read_event(body)
        except NotAnEvent as exc:
            log.warning("webhook-id=%s refused: %s", shown(webhook_id), exc)
            return answer(400, "bad_request", error=str(exc))
        try:
            return await run_in_threadpool(self._take, webhook_id, event, received)
        except (redis.RedisError, OSError) as exc:
            return self._unavailable(webhook_id, exc)
        except Exception as exc:  # kombu's broker errors have no common root
            return self._unavailable(webhook_id, exc)

    async def _verified(self, request: Request, webhook_id: str) -> bytes | Response:
        """The delivery's body once its signature verifies; else the refusal to send.

        Until then its bytes count against the budget of bodies being received.
        """
        headers = dict(request.headers)  # a repeated header: its first value
        try:
            signed_with = check_headers(headers, self.config.secrets)
        except Unverified as exc:
            return self._unauthorized(webhook_id, exc)
        with self.budget.hold() as hold:
            try:
                body = await read_body(request, self.config.max_bytes, hold)
            except TooLarge:
                self._refused(webhook_id, f"over {self.config.max_bytes} bytes")
                return answer(413, "too_large")
            except OverBudget:
                return self._over_budget()
            try:
                verify_checked(body, signed_with, self.config.secrets)
            except Unverified as exc:
                return self._unauthorized(webhook_id, exc)
        return body

    def _unauthorized(self, webhook_id: str, exc: Unverified) -> Response:
        self._refused(webhook_id, exc)
        return answer(401, "unauthorized", error="the signature does not verify")

    def _refused(self, webhook_id: str, reason: object) -> None:
        """Log a delivery refused before it verified: a line a minute at most.

        Anyone can send such requests, as many as they like; each is counted in
        ``toolfan_webhook_deliveries_total``, and the line shows the latest, with its reason
        (a wrong secret refuses every delivery for the same one).
        """
        count = self._unverified.due()
        if count is not None:
            log.warning(
                "webhook-id=%s refused: %s (refused unverified since the last such line: %d; "
                "toolfan_webhook_deliveries_total counts each)",
                shown(webhook_id),
                reason,
                count,
            )

    def _over_budget(self) -> Response:
        """503 for a delivery the budget has no room for; a line a minute at most."""
        count = self._busy.due()
        if count is not None:
            log.warning(
                "refused %d deliveries since the last such line: the bodies being received "
                "would go over TOOLFAN_WEBHOOK_MAX_PENDING_BYTES (%d bytes); the platform "
                "delivers them again",
                count,
                self.budget.total,
            )
        refused = answer(503, "busy", error="toolfan is receiving too much at once; retry later")
        refused.headers["retry-after"] = str(RETRY_AFTER)
        return refused

    def _take(self, webhook_id: str, event: Event, received: float) -> Response:
        """Deduplicate, then queue the dispatch (blocking: runs in a worker thread)."""
        seen = keys.webhook_seen(webhook_id)
        if not self.config.client.set(seen, 1, nx=True, ex=self.config.seen_ttl):
            return answer(200, "duplicate", event.label)
        if event.kind is Kind.IGNORE:
            log.info(
                "webhook-id=%s %s (%s) acknowledged, nothing to do",
                shown(webhook_id),
                event.type[:80],
                event.action,
            )
            return answer(200, "ignored", event.label)
        try:
            push.apply_async((event.session_id, received), retry=False, ignore_result=True)
        except BaseException:
            self.config.client.delete(seen)  # not taken: the platform's retry must count
            raise
        log.info(
            "webhook-id=%s session_id=%s dispatch queued",
            shown(webhook_id),
            shown(event.session_id or ""),
        )
        return answer(202, "accepted", event.label, session_id=event.session_id)

    def _unavailable(self, webhook_id: str, exc: BaseException) -> Response:
        log.error(
            "webhook-id=%s not taken (%s: %s); the platform will retry",
            shown(webhook_id),
            type(exc).__name__,
            exc,
        )
        return answer(503, "unavailable", error="toolfan cannot take deliveries right now")

    async def healthz(self, request: Request) -> Response:
        """200 when Redis and the broker answer, else 503 naming which does not."""
        checks = await run_in_threadpool(self._checks)
        status = 200 if all(v == "ok" for v in checks.values()) else 503
        return JSONResponse(checks, status_code=status)

    def _checks(self) -> dict[str, str]:
        checks = {}
        try:
            self.config.client.ping()
            checks["redis"] = "ok"
        except redis.RedisError as exc:
            checks["redis"] = f"down: {type(exc).__name__}"
        try:
            with celery_app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            checks["broker"] = "ok"
        except Exception as exc:  # kombu's connection errors have no common root
            checks["broker"] = f"down: {type(exc).__name__}"
        return checks

    async def metrics(self, request: Request) -> Response:
        """Prometheus metrics of this process, with the approval inbox read now."""
        await run_in_threadpool(self._read_approvals)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    def _read_approvals(self) -> None:
        try:
            count, nearest = self.approvals.waiting()
        except redis.RedisError:
            return  # /healthz says Redis is down; the gauges keep their last reading
        read_approvals(count, nearest, time.time())

    def operator(self, headers: Mapping[str, str]) -> Response | None:
        """None for a request bearing the operator token; else the refusal to send."""
        if self.config.token is None:
            return JSONResponse({"error": "set TOOLFAN_INTAKE_TOKEN to enable this endpoint"}, 403)
        if not _bearer_matches(headers, self.config.token):
            return JSONResponse({"error": "a valid bearer token is required"}, 401)
        return None

    async def watch_run(self, request: Request) -> Response:
        """``toolfan runs watch`` over HTTP: ``{"thread_id", "run_id"}``, bearer token."""
        refused = self.operator(request.headers)
        if refused is not None:
            return refused
        try:
            body = json.loads(await read_body(request, 65_536))
            pair = (body["thread_id"], body["run_id"])
            added = await run_in_threadpool(Watches(self.config.client).add, [pair])
        except TooLarge:
            return JSONResponse({"error": "body too large"}, 413)
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse({"error": f"expected {{'thread_id', 'run_id'}}: {exc}"[:300]}, 400)
        except redis.RedisError:
            return JSONResponse({"error": "toolfan cannot take watches right now"}, 503)
        return JSONResponse({"watching": True, "new": added == 1})


def _bearer_matches(headers: Mapping[str, str], token: str) -> bool:
    """Whether the request carries the token, compared in constant time."""
    given = headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.encode(), token.encode())


Handler = Callable[[Request], Awaitable[Response]]


def _either(page: Handler, api: Handler, for_page: Callable[[Request], bool]) -> Handler:
    """One route for the page (a browser's request) and the JSON API (everyone else's)."""

    async def route(request: Request) -> Response:
        return await (page if for_page(request) else api)(request)

    return route


def _browsing(request: Request) -> bool:
    return wants_html(request.headers.get("accept", ""))


async def _gone(request: Request, exc: Exception) -> Response:
    """A client that closed its connection (or had it closed) before its body arrived.

    Nobody is left to answer, and it is no fault of the intake's: a line at INFO, where
    the exception would otherwise reach uvicorn's log as an error with its traceback; at
    most one a minute, since the client decides how many there are.
    """
    count = _GONE.due()
    if count is not None:
        log.info(
            "%s %s: the client went away before its request arrived whole (%d such "
            "requests since the last such line)",
            request.method,
            shown(request.url.path),
            count,
        )
    return Response(status_code=400)


#: Requests whose client went away mid-request, for :func:`_gone`'s lines.
_GONE = Throttle()


def build_app(config: IntakeConfig) -> Starlette:
    """The intake's ASGI app over ``config``."""
    intake = Intake(config)
    PENDING_BYTES.set_function(lambda: intake.budget.held)  # read at each scrape only
    inbox = ApprovalsApi(intake.approvals, intake.operator)
    page = Page(intake.approvals, Operators(config.token) if config.token else None)
    return Starlette(
        routes=[
            Route("/webhooks/openai", intake.openai, methods=["POST"]),
            Route("/runs/watch", intake.watch_run, methods=["POST"]),
            Route("/approvals", _either(page.inbox, inbox.list, _browsing), methods=["GET"]),
            Route("/approvals/login", page.login_form, methods=["GET"]),
            Route("/approvals/login", page.login, methods=["POST"]),
            Route("/approvals/login/basic", page.basic, methods=["GET"]),
            Route("/approvals/logout", page.logout, methods=["POST"]),
            Route(
                "/approvals/{approval_id}",
                _either(page.detail, inbox.show, _browsing),
                methods=["GET"],
            ),
            Route(
                "/approvals/{approval_id}/approve",
                _either(page.approve, inbox.approve, is_form),
                methods=["POST"],
            ),
            Route(
                "/approvals/{approval_id}/deny",
                _either(page.deny, inbox.deny, is_form),
                methods=["POST"],
            ),
            Route("/healthz", intake.healthz, methods=["GET"]),
            Route("/metrics", intake.metrics, methods=["GET"]),
        ],
        exception_handlers={ClientDisconnect: _gone},
    )


def config_from_env() -> IntakeConfig:
    """The intake's configuration from this process's settings and environment."""
    from dispatcher.sources.agents import SOURCE
    from tasks.runtime import get_ledger, get_settings

    settings = get_settings()
    token = settings.intake_token.get_secret_value() if settings.intake_token else None
    return IntakeConfig(
        get_ledger(SOURCE.name).client,
        settings.webhook_max_bytes,
        secrets(),
        token,
        settings.webhook_dedup_ttl,
        settings.webhook_max_pending_bytes,
    )
