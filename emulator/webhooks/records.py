"""What the emulator pushed: one record per event and one per delivery attempt.

A receiver's test asserts on both sides of the wire: what arrived (its own log) and what
was meant to (these records), including what a fault kept from arriving, which only the
sender can know: a lost attempt, a dropped event, a retry given up on.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.wire import JSON

#: Where an event came from: a session starting to wait, a stale echo of an answered one,
#: the admin ``send``, the API's ``test`` call, or the admin ``send_raw``.
SOURCES = ("session", "stale", "send", "test", "raw")
#: What became of an attempt: answered 2xx; sent and not 2xx (or no answer); lost by
#: ``fail_first`` before sending; never sent because ``drop`` took the event.
OUTCOMES = ("delivered", "failed", "lost", "dropped")


@dataclass(frozen=True)
class EventRecord:
    """One published event.

    Attributes:
        event_id: The body's ``id``.
        webhook_id: The ``webhook-id`` every delivery of it carries.
        type: The event type.
        session_id: The session it names (``data.id`` of a session event), else ``None``.
        source: One of :data:`SOURCES`.
        endpoint_ids: The endpoints it was addressed to.
        dropped: The ``drop`` fault took it: nothing was sent.
        duplicated: The ``duplicate`` fault sends it twice to each endpoint.
        created_at: The body's ``created_at``.
        body: The exact body text sent.
    """

    event_id: str
    webhook_id: str
    type: str
    session_id: str | None
    source: str
    endpoint_ids: tuple[str, ...]
    dropped: bool
    duplicated: bool
    created_at: int
    body: str

    def to_json(self) -> JSON:
        """The admin API's form."""
        return {
            "event_id": self.event_id,
            "webhook_id": self.webhook_id,
            "type": self.type,
            "session_id": self.session_id,
            "source": self.source,
            "endpoint_ids": list(self.endpoint_ids),
            "dropped": self.dropped,
            "duplicated": self.duplicated,
            "created_at": self.created_at,
            "body": self.body,
        }


@dataclass(frozen=True)
class DeliveryRecord:
    """One attempt to deliver one event to one endpoint (or the note that none was made).

    Attributes:
        seq: Position in the log, from 1.
        event_id: The event's id (``None`` for a raw delivery whose body is not an event).
        webhook_id: The ``webhook-id`` header sent (for a raw delivery: as given, if any).
        event_type: The event type, if known.
        session_id: The session the event names, if any.
        endpoint_id: The endpoint (``None`` for a raw delivery to a bare URL).
        url: Where it was sent.
        attempt: 1 for the first attempt; 0 for a dropped event (never attempted).
        duplicate: This is the ``duplicate`` fault's second copy of the event.
        source: One of :data:`SOURCES`.
        sent_at: Unix time the request started; ``None`` when nothing was sent.
        status: The receiver's HTTP status; ``None`` when there was none.
        error: Why there was no answer (connection refused, timeout, a fault), else ``None``.
        duration_ms: How long the attempt took; ``None`` when nothing was sent.
        outcome: One of :data:`OUTCOMES`.
        final: No further attempt follows (delivered, given up, dropped, or one-shot).
        signatures: How many signatures the ``webhook-signature`` header carried.
    """

    seq: int
    event_id: str | None
    webhook_id: str | None
    event_type: str | None
    session_id: str | None
    endpoint_id: str | None
    url: str
    attempt: int
    duplicate: bool
    source: str
    sent_at: float | None
    status: int | None
    error: str | None
    duration_ms: float | None
    outcome: str
    final: bool
    signatures: int

    def to_json(self) -> JSON:
        """The admin API's form."""
        return {
            "seq": self.seq,
            "event_id": self.event_id,
            "webhook_id": self.webhook_id,
            "event_type": self.event_type,
            "session_id": self.session_id,
            "endpoint_id": self.endpoint_id,
            "url": self.url,
            "attempt": self.attempt,
            "duplicate": self.duplicate,
            "source": self.source,
            "sent_at": self.sent_at,
            "status": self.status,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
            "final": self.final,
            "signatures": self.signatures,
        }
