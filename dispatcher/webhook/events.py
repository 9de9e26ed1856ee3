"""Reading a verified delivery: which event, and the one session it names.

Only the session id is trusted, and only as a name to retrieve: the session itself, read
from the API, decides what is pending (``required_actions`` is the authority).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dispatcher.models import addressable
from handlers import jsonsafe

ACTION_REQUIRED = "agent.session.action_required"
#: Event types counted by name; any other is counted as ``other`` (labels stay bounded).
KNOWN_TYPES = frozenset(
    {
        ACTION_REQUIRED,
        "agent.session.created",
        "agent.session.idle",
        "agent.session.in_progress",
        "agent.session.failed",
    }
)
#: Nesting an event may have (a real one has four levels).
MAX_DEPTH = 32


class NotAnEvent(ValueError):
    """A verified body that is not the event JSON (the message says what is wrong)."""


class Kind(StrEnum):
    """What a delivery asks of toolfan."""

    DISPATCH = "dispatch"
    IGNORE = "ignore"


@dataclass(frozen=True)
class Event:
    """A delivery's event, as far as toolfan reads it."""

    type: str
    kind: Kind
    session_id: str | None = None
    action: str | None = None

    @property
    def label(self) -> str:
        """The event type as a metric label."""
        return self.type if self.type in KNOWN_TYPES else "other"


def read_event(body: bytes) -> Event:
    """The event a verified body holds.

    Raises:
        NotAnEvent: it is not JSON, not an object, or lacks what its type needs.
    """
    try:
        value = jsonsafe.loads(body, max_depth=MAX_DEPTH)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotAnEvent(f"not JSON: {str(exc)[:200]}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise NotAnEvent("not an event: an object with a string 'type' is expected")
    kind = value["type"]
    if kind != ACTION_REQUIRED:
        return Event(kind[:200], Kind.IGNORE)
    return _action_required(value.get("data"))


def _action_required(data: Any) -> Event:
    if not isinstance(data, dict):
        raise NotAnEvent(f"{ACTION_REQUIRED} without a 'data' object")
    session_id = data.get("id")
    if not isinstance(session_id, str) or not addressable(session_id):
        raise NotAnEvent(f"{ACTION_REQUIRED} whose data.id is no session id")
    required = data.get("required_action")
    action = required.get("type") if isinstance(required, dict) else None
    if not isinstance(action, str):
        raise NotAnEvent(f"{ACTION_REQUIRED} without data.required_action.type")
    kind = Kind.DISPATCH if action == "function_call" else Kind.IGNORE
    return Event(ACTION_REQUIRED, kind, session_id, action[:100])
