"""The events the emulator pushes: their types, bodies, and what a waiting session sends.

Shapes follow the official ``openai`` package (3.51.0, ``openai/types/webhooks/``), whose
``client.webhooks.unwrap`` parses them: ``{"id": "evt_...", "object": "event", "type",
"created_at", "data"}``. ``agent.session.action_required`` names the session and the kind
of action only; a receiver retrieves the session for the calls, so an event never has to
be trusted beyond its session id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

from emulator.jsontext import dumps
from emulator.sessions import Session
from emulator.wire import FUNCTION_CALL, JSON, action_key, new_id

ACTION_REQUIRED = "agent.session.action_required"
#: Every event type an endpoint may subscribe to (the SDK's ``WebhookCreateParams``).
EVENT_TYPES: tuple[str, ...] = (
    "batch.completed",
    "batch.failed",
    "batch.expired",
    "batch.cancelled",
    "response.completed",
    "response.failed",
    "response.cancelled",
    "response.incomplete",
    "eval.run.succeeded",
    "eval.run.failed",
    "eval.run.canceled",
    "fine_tuning.job.succeeded",
    "fine_tuning.job.failed",
    "fine_tuning.job.cancelled",
    "realtime.call.incoming",
    "video.completed",
    "video.failed",
    "agent.environment.ready",
    "agent.environment.failed",
    "agent.environment.suspended",
    "agent.environment.expired",
    "agent.session.created",
    ACTION_REQUIRED,
    "agent.session.in_progress",
    "agent.session.idle",
    "agent.session.failed",
    "safety.alert.created",
)
#: Id prefixes of the objects sample events name, by event type prefix.
_SAMPLE_PREFIXES = {
    "batch.": "batch",
    "response.": "resp",
    "eval.run.": "evalrun",
    "fine_tuning.job.": "ftjob",
    "video.": "video",
    "agent.environment.": "env",
    "safety.": "alert",
}


@dataclass(frozen=True)
class Event:
    """One event, rendered once: every attempt and duplicate sends the same bytes.

    Attributes:
        id: The event's ``evt_...`` id (inside the body).
        type: The event type.
        data: The ``data`` object.
        created_at: Unix seconds.
        webhook_id: The ``webhook-id`` header: one per event, kept by retries and
            duplicates, so a receiver deduplicates by it.
    """

    id: str
    type: str
    data: JSON
    created_at: int = field(default_factory=lambda: int(time.time()))
    webhook_id: str = field(default_factory=lambda: new_id("wh"))

    def to_json(self) -> JSON:
        """The body object."""
        return {
            "id": self.id,
            "object": "event",
            "type": self.type,
            "created_at": self.created_at,
            "data": self.data,
        }

    @cached_property
    def body(self) -> bytes:
        """The body bytes: compact ASCII JSON (a lone surrogate in an id is escaped)."""
        return dumps(self.to_json()).encode("ascii")

    @property
    def session_id(self) -> str | None:
        """The session a session event names (``data.id``), else ``None``."""
        subject = self.data.get("id")
        is_session = self.type.startswith("agent.session.")
        return subject if is_session and isinstance(subject, str) else None


def new_event(
    event_type: str,
    data: JSON,
    *,
    event_id: str | None = None,
    webhook_id: str | None = None,
    created_at: int | None = None,
) -> Event:
    """An event with fresh ids and the current time unless given."""
    return Event(
        id=event_id or new_id("evt"),
        type=event_type,
        data=data,
        created_at=int(time.time()) if created_at is None else created_at,
        webhook_id=webhook_id or new_id("wh"),
    )


def action_required(session_id: str, action_type: str) -> Event:
    """``agent.session.action_required`` for a session waiting on ``action_type`` actions."""
    return new_event(ACTION_REQUIRED, {"id": session_id, "required_action": {"type": action_type}})


def sample_data(event_type: str) -> JSON:
    """Plausible ``data`` for a test event of ``event_type``, parseable by the SDK's model."""
    if event_type == ACTION_REQUIRED:
        return {"id": new_id("sess"), "required_action": {"type": FUNCTION_CALL}}
    if event_type.startswith("agent.session."):
        return {"id": new_id("sess"), "environment_type": "none"}
    if event_type == "realtime.call.incoming":
        return {"call_id": new_id("rtc"), "sip_headers": []}
    prefix = next((p for k, p in _SAMPLE_PREFIXES.items() if event_type.startswith(k)), "obj")
    return {"id": new_id(prefix)}


def waiting_type(session: Session) -> str | None:
    """The ``required_action.type`` an event about ``session`` carries; ``None`` if not waiting.

    ``function_call`` when any pending action is one (raw actions stand for function
    calls); otherwise the kind of the first pending action, e.g. ``mcp_approval_request``.
    """
    pending = session.pending_keys()
    kinds: list[str] = [
        action_key(a)[0] for a in session.required_actions if action_key(a) in pending
    ]
    kinds += [FUNCTION_CALL for r in session.raw_actions if r.key in pending]
    if not kinds:
        return None
    return FUNCTION_CALL if FUNCTION_CALL in kinds else kinds[0]
