"""The webhooks half of the emulator's world: endpoints, published events, deliveries.

``EmulatorState.webhooks`` holds one :class:`WebhookState`. The API routes and the admin
routes (on uvicorn's loop), the session hooks (under the emulator state's lock) and the
delivery workers (on their own threads) share it, so every public method takes its lock
and returns copies. It never calls back into the emulator state, so the lock order is
always emulator state, then this, then the dispatcher's queue.

Publishing only queues work; the HTTP happens on the dispatcher's workers, so creating a
session never waits for a receiver. The exceptions are the API's ``test`` call and the
admin's ``send_raw``, whose callers want the receiver's answer: they send once, in the
calling thread (the routes run them in a worker thread, off the event loop).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import httpx

from emulator.webhooks.delivery import AttemptResult, Delivery, attempt
from emulator.webhooks.dispatcher import Dispatcher, FollowUp
from emulator.webhooks.endpoints import Endpoint, EndpointStore
from emulator.webhooks.events import (
    ACTION_REQUIRED,
    EVENT_TYPES,
    Event,
    action_required,
    new_event,
    sample_data,
)
from emulator.webhooks.faults import Dice, WebhookFaults
from emulator.webhooks.params import (
    ListQuery,
    parse_create,
    parse_rotate,
    parse_test,
    parse_update,
)
from emulator.webhooks.records import DeliveryRecord, EventRecord
from emulator.webhooks.sender import Attempted, Headers, new_client, post
from emulator.webhooks.signing import delivery_headers, sign
from emulator.wire import JSON, WireError

#: The logs keep the most recent entries only, so long benchmarks stay bounded in memory.
LOG_SIZE = 100_000


def _header(headers: Headers, name: str) -> str | None:
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return next((v for k, v in pairs if k.lower() == name), None)


def _describe(body: bytes) -> tuple[str | None, str | None, str | None]:
    """``(event id, type, session id)`` of a raw body, as far as it is an event at all."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None, None, None
    if not isinstance(parsed, dict):
        return None, None, None
    data = parsed.get("data")
    subject = data.get("id") if isinstance(data, dict) else None
    kind, event_id = parsed.get("type"), parsed.get("id")
    return (
        event_id if isinstance(event_id, str) else None,
        kind if isinstance(kind, str) else None,
        subject if isinstance(subject, str) else None,
    )


class WebhookState:
    """Webhook endpoints and the pushes made to them, scriptable from Python.

    The hooks :meth:`session_waiting` and :meth:`session_answered` are called by
    ``EmulatorState``; tests call :meth:`register`, :meth:`set_faults`,
    :meth:`deliveries`, :meth:`wait_idle` and the like.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._endpoints = EndpointStore()
        self._dice = Dice(WebhookFaults())
        self._events: deque[EventRecord] = deque(maxlen=LOG_SIZE)
        self._deliveries: deque[DeliveryRecord] = deque(maxlen=LOG_SIZE)
        self._seq = 0
        self._generation = 0
        self._dispatcher: Dispatcher[Delivery] = Dispatcher(self._run, name="emulator-webhooks")

    def clear(self) -> None:
        """Forget endpoints, events, deliveries and faults; abandon every queued delivery."""
        with self._lock:
            self._generation += 1
            self._dispatcher.clear()
            self._endpoints.clear()
            self._events.clear()
            self._deliveries.clear()
            self._seq = 0
            self._dice = Dice(WebhookFaults())

    # --- endpoints: the API's calls ----------------------------------------------------------

    def create_endpoint(self, body: Any, *, secret: str | None = None) -> JSON:
        """``POST /webhook_endpoints``: the new endpoint with its ``signing_secret``.

        ``secret`` chooses the secret (``whsec_<base64>``, for tests); a fresh one if omitted.
        """
        change = parse_create(body)
        with self._lock:
            return self._endpoints.create(change, secret).to_json(with_secret=True)

    def register(
        self,
        url: str,
        event_types: tuple[str, ...] | list[str] = (ACTION_REQUIRED,),
        *,
        name: str = "",
        secret: str | None = None,
    ) -> JSON:
        """Register an endpoint without the API; returns it with its ``signing_secret``."""
        body = {"url": url, "name": name, "event_types": list(event_types)}
        return self.create_endpoint(body, secret=secret)

    def endpoint(self, endpoint_id: str) -> JSON:
        """``GET /webhook_endpoints/{id}``; 404 when unknown."""
        with self._lock:
            return self._endpoints.get(endpoint_id).to_json()

    def endpoints(self, *, with_secrets: bool = False) -> list[JSON]:
        """Every endpoint, oldest first (with their current secrets, if asked)."""
        with self._lock:
            return [e.to_json(with_secret=with_secrets) for e in self._endpoints.all()]

    def list_endpoints(self, query: ListQuery) -> JSON:
        """``GET /webhook_endpoints``: one cursor page, newest first."""
        with self._lock:
            return self._endpoints.page(query)

    def update_endpoint(self, endpoint_id: str, body: Any) -> JSON:
        """``POST /webhook_endpoints/{id}``: change ``url``, ``name``, ``event_types``."""
        change = parse_update(body)
        with self._lock:
            return self._endpoints.update(endpoint_id, change).to_json()

    def delete_endpoint(self, endpoint_id: str) -> JSON:
        """``DELETE /webhook_endpoints/{id}``: the deleted object; its deliveries stop."""
        with self._lock:
            self._endpoints.delete(endpoint_id)
            return {"id": endpoint_id, "object": "webhook_endpoint.deleted", "deleted": True}

    def rotate_secret(self, endpoint_id: str, body: Any) -> JSON:
        """``POST .../rotate_secret``: the endpoint with its new ``signing_secret``."""
        keep_old = parse_rotate(body)
        with self._lock:
            return self._endpoints.rotate(endpoint_id, keep_old).to_json(with_secret=True)

    def test_endpoint(self, endpoint_id: str, body: Any) -> JSON:
        """``POST .../test``: send one sample event now, once, and report the answer.

        Faults do not apply: the call checks the endpoint, and its caller reads the status
        in the answer. An endpoint that does not answer at all is a 400.

        Raises:
            WireError: 404 unknown endpoint, 400 invalid body or unreachable endpoint.
        """
        event_type = parse_test(body)
        event = new_event(event_type, sample_data(event_type))
        with self._lock:
            endpoint = self._endpoints.get(endpoint_id)
            delivery = Delivery(event, endpoint.id, "test", generation=self._generation)
            url, secrets = endpoint.url, endpoint.secrets(time.time())
            timeout = self._dice.faults.timeout
            self._log_event(event, "test", [endpoint], dropped=False, duplicated=False)
        headers = delivery_headers(event.webhook_id, event.body, secrets)
        with new_client() as client:
            attempted = post(client, url, event.body, headers, timeout)
        outcome = "delivered" if attempted.ok else "failed"
        self._record(delivery, url, AttemptResult(attempted, outcome, True, len(secrets)))
        if attempted.status is None:
            raise WireError(
                400,
                f"The webhook endpoint did not answer the test event: {attempted.error}",
                code="webhook_endpoint_unreachable",
            )
        return {
            "object": "webhook_endpoint.test",
            "webhook_endpoint_id": endpoint_id,
            "event_type": event_type,
            "status_code": attempted.status,
            "success": True,
        }

    @staticmethod
    def event_types() -> JSON:
        """``GET /webhook_event_types``."""
        return {"object": "list", "data": list(EVENT_TYPES)}

    # --- publishing --------------------------------------------------------------------------

    def session_waiting(self, session_id: str, action_type: str) -> None:
        """Hook: a session started waiting on actions; push ``agent.session.action_required``."""
        with self._lock:
            targets = self._targets(ACTION_REQUIRED)
            if targets:  # nobody listens: no event at all, and no dice rolled
                self._publish(action_required(session_id, action_type), "session", targets)

    def session_answered(self, session_id: str, action_type: str) -> None:
        """Hook: a session stopped waiting; the ``stale`` fault may push a late event for it."""
        with self._lock:
            targets = self._targets(ACTION_REQUIRED)
            if targets and self._dice.hit(self._dice.faults.stale):
                self._publish(action_required(session_id, action_type), "stale", targets)

    def send(
        self,
        event_type: str,
        data: JSON,
        *,
        endpoint_id: str | None = None,
        event_id: str | None = None,
        webhook_id: str | None = None,
        created_at: int | None = None,
    ) -> JSON:
        """Push an arbitrary signed event to every endpoint (or one), subscribed or not.

        It takes the usual path: faults, retries, records. Returns the event's record.
        ``webhook_id`` may repeat an earlier event's, to test a receiver's deduplication.

        Raises:
            WireError: 404 for an unknown ``endpoint_id``.
        """
        if not isinstance(event_type, str) or not event_type:
            raise ValueError("an event needs a non-empty string 'type'")
        if not isinstance(data, dict):
            raise ValueError("an event's 'data' must be a JSON object")
        event = new_event(
            event_type, data, event_id=event_id, webhook_id=webhook_id, created_at=created_at
        )
        with self._lock:
            targets = self._chosen(endpoint_id)
            return self._publish(event, "send", targets).to_json()

    def send_raw(
        self,
        body: bytes | str,
        headers: Headers,
        *,
        endpoint_id: str | None = None,
        url: str | None = None,
    ) -> list[JSON]:
        """POST raw bytes with exactly the given headers, once per target, and report.

        For forged and tampered deliveries: nothing is signed or added (``httpx`` still
        sends its own ``host``, ``content-length`` and defaults such as ``user-agent``
        unless given), no fault applies and nothing is retried. Targets: ``url``, else
        the endpoint ``endpoint_id``, else every endpoint. Blocks until all have answered.
        """
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
        with self._lock:
            endpoints = [] if url is not None else self._chosen(endpoint_id)
            targets = [(None, url)] if url is not None else [(e.id, e.url) for e in endpoints]
            generation, timeout = self._generation, self._dice.faults.timeout
        if not targets:
            raise ValueError("no webhook endpoint to send to: register one or give a 'url'")
        results = []
        with new_client() as client:
            for target_id, target_url in targets:
                attempted = post(client, target_url, raw, headers, timeout)
                self._record_raw(generation, target_id, target_url, raw, headers, attempted)
                results.append(
                    {
                        "endpoint_id": target_id,
                        "url": target_url,
                        "status": attempted.status,
                        "error": attempted.error,
                        "duration_ms": attempted.duration_ms,
                        "answer": attempted.answer,
                    }
                )
        return results

    def _chosen(self, endpoint_id: str | None) -> list[Endpoint]:
        if endpoint_id is None:
            return self._endpoints.all()
        return [self._endpoints.get(endpoint_id)]

    def _targets(self, event_type: str) -> list[Endpoint]:
        return [e for e in self._endpoints.all() if e.subscribes(event_type)]

    def _publish(self, event: Event, source: str, chosen: list[Endpoint]) -> EventRecord:
        """Roll ``drop`` and ``duplicate`` once per event, then queue one delivery per copy."""
        faults = self._dice.faults
        dropped = bool(chosen) and self._dice.hit(faults.drop)
        duplicated = bool(chosen) and not dropped and self._dice.hit(faults.duplicate)
        record = self._log_event(event, source, chosen, dropped=dropped, duplicated=duplicated)
        for endpoint in chosen:
            delivery = Delivery(event, endpoint.id, source, generation=self._generation)
            if dropped:
                self._record_dropped(delivery, endpoint.url)
                continue
            copies = (delivery, dataclasses.replace(delivery, duplicate=True))
            for copy in copies[: 2 if duplicated else 1]:
                self._dispatcher.submit(copy, self._dice.first_delay(), faults.concurrency)
        return record

    # --- the workers' side -------------------------------------------------------------------

    def _run(self, delivery: Delivery, client: httpx.Client) -> FollowUp[Delivery] | None:
        """One attempt of a queued delivery (a worker thread); a retry if it failed."""
        with self._lock:
            endpoint = self._endpoints.find(delivery.endpoint_id)
            if delivery.generation != self._generation or endpoint is None:
                return None  # reset or deleted since queued: abandon quietly
            faults = self._dice.faults
            url, secrets = endpoint.url, endpoint.secrets(time.time())
        result = attempt(delivery, url, secrets, faults, client)
        self._record(delivery, url, result)
        if result.final:
            return None
        return faults.backoff(delivery.attempt), delivery.retry()

    # --- records -----------------------------------------------------------------------------

    def _log_event(
        self,
        event: Event,
        source: str,
        targets: list[Endpoint],
        *,
        dropped: bool,
        duplicated: bool,
    ) -> EventRecord:
        record = EventRecord(
            event_id=event.id,
            webhook_id=event.webhook_id,
            type=event.type,
            session_id=event.session_id,
            source=source,
            endpoint_ids=tuple(e.id for e in targets),
            dropped=dropped,
            duplicated=duplicated,
            created_at=event.created_at,
            body=event.body.decode("ascii"),
        )
        self._events.append(record)
        return record

    def _append(self, generation: int, **fields: Any) -> None:
        with self._lock:
            if generation != self._generation:  # a reset happened mid-attempt
                return
            self._seq += 1
            self._deliveries.append(DeliveryRecord(seq=self._seq, **fields))

    def _record(self, delivery: Delivery, url: str, result: AttemptResult) -> None:
        event, attempted = delivery.event, result.attempted
        self._append(
            delivery.generation,
            event_id=event.id,
            webhook_id=event.webhook_id,
            event_type=event.type,
            session_id=event.session_id,
            endpoint_id=delivery.endpoint_id,
            url=url,
            attempt=delivery.attempt,
            duplicate=delivery.duplicate,
            source=delivery.source,
            sent_at=attempted.sent_at,
            status=attempted.status,
            error=attempted.error,
            duration_ms=attempted.duration_ms,
            outcome=result.outcome,
            final=result.final,
            signatures=result.signatures,
        )

    def _record_dropped(self, delivery: Delivery, url: str) -> None:
        dropped = Attempted(
            sent_at=None, status=None, error="dropped (drop fault)", duration_ms=None
        )
        result = AttemptResult(dropped, "dropped", True, 0)
        self._record(dataclasses.replace(delivery, attempt=0), url, result)

    def _record_raw(
        self,
        generation: int,
        endpoint_id: str | None,
        url: str,
        body: bytes,
        headers: Headers,
        attempted: Attempted,
    ) -> None:
        event_id, event_type, session_id = _describe(body)
        signature = _header(headers, "webhook-signature")
        self._append(
            generation,
            event_id=event_id,
            webhook_id=_header(headers, "webhook-id"),
            event_type=event_type,
            session_id=session_id,
            endpoint_id=endpoint_id,
            url=url,
            attempt=1,
            duplicate=False,
            source="raw",
            sent_at=attempted.sent_at,
            status=attempted.status,
            error=attempted.error,
            duration_ms=attempted.duration_ms,
            outcome="delivered" if attempted.ok else "failed",
            final=True,
            signatures=len(signature.split()) if signature else 0,
        )

    # --- faults and reading back -------------------------------------------------------------

    def set_faults(self, faults: WebhookFaults | None = None, **knobs: Any) -> WebhookFaults:
        """Replace the delivery knobs (an object, or knobs over the defaults); reseeds."""
        with self._lock:
            self._dice = Dice(faults or WebhookFaults(**knobs))
            return self._dice.faults

    @property
    def faults(self) -> WebhookFaults:
        """The delivery knobs now."""
        with self._lock:
            return self._dice.faults

    def deliveries(
        self,
        session: str | None = None,
        event: str | None = None,
        *,
        endpoint: str | None = None,
        webhook_id: str | None = None,
    ) -> list[DeliveryRecord]:
        """Every attempt (and dropped event), oldest first, optionally filtered.

        ``session``: the session id the event names; ``event``: the event id;
        ``endpoint``: the endpoint id; ``webhook_id``: the ``webhook-id`` header.
        """
        with self._lock:
            return [
                d
                for d in self._deliveries
                if session in (None, d.session_id)
                and event in (None, d.event_id)
                and endpoint in (None, d.endpoint_id)
                and webhook_id in (None, d.webhook_id)
            ]

    def events(self, session: str | None = None, source: str | None = None) -> list[EventRecord]:
        """Every published event, oldest first; ``session`` and ``source`` filter."""
        with self._lock:
            return [
                e
                for e in self._events
                if session in (None, e.session_id) and source in (None, e.source)
            ]

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every queued and retrying delivery is done or given up.

        Returns ``False`` if deliveries are still pending after ``timeout`` seconds.
        """
        return self._dispatcher.wait_idle(timeout)

    def pending(self) -> int:
        """Deliveries queued (including retries waiting for their backoff) or in flight."""
        return self._dispatcher.pending()

    @staticmethod
    def sign(secret: str, webhook_id: str, timestamp: int | str, body: bytes | str) -> str:
        """The ``v1,<base64>`` signature a receiver must compute for these values."""
        return sign(secret, webhook_id, timestamp, body)
