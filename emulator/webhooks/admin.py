"""Admin routes of the webhooks under ``/_emulator/webhooks``: faults, records, pushes.

They mirror ``EmulatorState.webhooks`` for a test or demo in another process: register an
endpoint without the API, push an arbitrary signed event or raw forged bytes through the
same HTTP path real deliveries take, and read back every attempt. Like every admin route
they need no token and are never faulted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from emulator.admin import admin_body, admin_endpoint
from emulator.jsontext import JsonResponse
from emulator.paths import RawRoute, query_items
from emulator.webhooks.events import ACTION_REQUIRED
from emulator.webhooks.faults import WebhookFaults
from emulator.webhooks.sender import Headers
from emulator.webhooks.state import WebhookState

Handler = Callable[[Request], Awaitable[Response]]
_REGISTER_KEYS = frozenset({"url", "name", "event_types", "signing_secret"})
_SEND_KEYS = frozenset({"type", "data", "endpoint_id", "id", "webhook_id", "created_at"})
_RAW_KEYS = frozenset({"body", "body_base64", "headers", "endpoint_id", "url"})


def _known(body: dict[str, Any], keys: frozenset[str]) -> None:
    unknown = sorted(set(body) - keys)
    if unknown:
        raise ValueError(f"unknown keys {unknown}; known: {sorted(keys)}")


def _raw_body(body: dict[str, Any]) -> bytes:
    """``body`` (text, sent as UTF-8) or ``body_base64`` (any bytes), exactly one."""
    if ("body" in body) == ("body_base64" in body):
        raise ValueError("give exactly one of 'body' (text) and 'body_base64'")
    if "body" in body:
        if not isinstance(body["body"], str):
            raise ValueError("'body' must be a string")
        return body["body"].encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(body["body_base64"], validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ValueError("'body_base64' must be base64") from None


def _raw_headers(value: Any) -> Headers:
    """An object of headers, or ``[[name, value], ...]`` (to repeat a header)."""
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in value
    ):
        return [(p[0], p[1]) for p in value]
    raise ValueError("'headers' must be an object of strings or a list of [name, value] pairs")


class WebhooksAdmin:
    """The ``/_emulator/webhooks`` endpoints over one :class:`WebhookState`."""

    def __init__(self, webhooks: WebhookState) -> None:
        self.webhooks = webhooks

    def routes(self, prefix: str = "/_emulator/webhooks") -> list[BaseRoute]:
        """The routes, under ``prefix``."""
        table: list[tuple[str, str, Handler]] = [
            ("/faults", "GET", self.get_faults),
            ("/faults", "PUT", self.put_faults),
            ("/endpoints", "POST", self.register),
            ("/endpoints", "GET", self.endpoints),
            ("/deliveries", "GET", self.deliveries),
            ("/events", "GET", self.events),
            ("/send", "POST", self.send),
            ("/send_raw", "POST", self.send_raw),
            ("/wait_idle", "POST", self.wait_idle),
        ]
        return [
            RawRoute(prefix + path, admin_endpoint(handler), methods=[method])
            for path, method, handler in table
        ]

    async def get_faults(self, request: Request) -> Response:
        """The delivery knobs now."""
        return JsonResponse(self.webhooks.faults.to_json())

    async def put_faults(self, request: Request) -> Response:
        """Replace the delivery knobs (omitted ones go back to their defaults) and reseed."""
        faults = self.webhooks.set_faults(WebhookFaults.from_json(await admin_body(request)))
        return JsonResponse(faults.to_json())

    async def register(self, request: Request) -> Response:
        """Register an endpoint: ``{"url", "event_types"?, "name"?, "signing_secret"?}``; 201.

        ``event_types`` defaults to ``["agent.session.action_required"]``; ``signing_secret``
        (``whsec_<base64>``) fixes the secret instead of a fresh one. The answer carries it.
        """
        body = await admin_body(request)
        _known(body, _REGISTER_KEYS)
        secret = body.pop("signing_secret", None)
        body.setdefault("event_types", [ACTION_REQUIRED])
        return JsonResponse(self.webhooks.create_endpoint(body, secret=secret), status_code=201)

    async def endpoints(self, request: Request) -> Response:
        """Every endpoint, oldest first, with its current ``signing_secret``."""
        return JsonResponse({"data": self.webhooks.endpoints(with_secrets=True)})

    async def deliveries(self, request: Request) -> Response:
        """Every attempt, oldest first, optionally filtered.

        Filters: ``session``, ``event``, ``endpoint``, ``webhook_id``; ``offset=N`` skips the
        first N that pass them, so a watcher reads each new record once.
        """
        params = dict(query_items(request.scope))
        offset = int(params.get("offset", "0"))
        if offset < 0:
            raise ValueError("offset must be >= 0")
        chosen = self.webhooks.deliveries(
            params.get("session"),
            params.get("event"),
            endpoint=params.get("endpoint"),
            webhook_id=params.get("webhook_id"),
        )
        return JsonResponse({"data": [d.to_json() for d in chosen[offset:]]})

    async def events(self, request: Request) -> Response:
        """Every published event, oldest first; ``session`` and ``source`` filter."""
        params = dict(query_items(request.scope))
        chosen = self.webhooks.events(params.get("session"), params.get("source"))
        return JsonResponse({"data": [e.to_json() for e in chosen]})

    async def send(self, request: Request) -> Response:
        """Push a signed event to every endpoint (or one), through faults and retries; 202.

        Body: ``{"type", "data", "endpoint_id"?, "id"?, "webhook_id"?, "created_at"?}``; a
        repeated ``webhook_id`` tests a receiver's deduplication.
        """
        body = await admin_body(request)
        _known(body, _SEND_KEYS)
        record = self.webhooks.send(
            body.get("type", ""),
            body.get("data", {}),
            endpoint_id=body.get("endpoint_id"),
            event_id=body.get("id"),
            webhook_id=body.get("webhook_id"),
            created_at=body.get("created_at"),
        )
        return JsonResponse(record, status_code=202)

    async def send_raw(self, request: Request) -> Response:
        """POST raw bytes with exactly the given headers, once, and report each answer.

        ``{"body" | "body_base64", "headers", "url"? | "endpoint_id"?}``: to ``url``, else
        to that endpoint, else to every endpoint. Answers ``{"data": [{"endpoint_id",
        "url", "status", "error", "duration_ms", "answer"}]}`` once all have answered.
        """
        body = await admin_body(request)
        _known(body, _RAW_KEYS)
        raw, headers = _raw_body(body), _raw_headers(body.get("headers", {}))
        results = await asyncio.to_thread(
            self.webhooks.send_raw,
            raw,
            headers,
            endpoint_id=body.get("endpoint_id"),
            url=body.get("url"),
        )
        return JsonResponse({"data": results})

    async def wait_idle(self, request: Request) -> Response:
        """Wait (``{"timeout": s}``, default 10) until no delivery is queued or retrying."""
        timeout = float((await admin_body(request)).get("timeout", 10.0))
        idle = await asyncio.to_thread(self.webhooks.wait_idle, timeout)
        return JsonResponse({"idle": idle, "pending": self.webhooks.pending()})
