"""The envelope of one call: what an ``execute`` message carries, by name.

Every field is named in the message (``execute(call={...})``), so routing, logging and the
engine read what they need by name, whatever the source; a source that has more context
(the agent, the batch's metadata, a deadline) passes it here, for the tool to get later.
Only JSON types travel: the message is JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from handlers.jsonsafe import string_pairs
from tasks.ledger import CallRef

#: The source of a message written before envelopes: positional Agents session calls.
LEGACY_SOURCE = "agents"


#: A batch's metadata as the APIs bound it: pairs, and characters of a key and of a value.
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


def bounded_metadata(value: Any) -> dict[str, str] | None:
    """A batch's metadata fit to copy into each of its calls' messages, or None if empty.

    The APIs cap metadata at 16 pairs of a 64-character key and a 512-character value; a
    hostile answer need not, and every call's message would carry its copy. So pairs past
    those bounds are left out (the first 16 that fit are kept).
    """
    pairs = {
        k: v
        for k, v in string_pairs(value).items()
        if len(k) <= METADATA_KEY_CHARS and len(v) <= METADATA_VALUE_CHARS
    }
    return dict(list(pairs.items())[:METADATA_PAIRS]) or None


class BadEnvelope(ValueError):
    """A message whose envelope is not one toolfan wrote."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """One call, as the engine runs it.

    Attributes:
        source: The source of its batch (a :mod:`tasks.sources` name).
        batch_id: The batch it is answered in (an Agents session id, a run's phase, ...).
        turn_id: Where the source has turns, the call's turn; else empty.
        call_id: The call's id within its batch (and turn).
        name: The function's name, as the model sent it.
        arguments: The arguments, as the model sent them (a JSON string or a value).
        problem: Why the poller refused the arguments unread (too deep, too large), if so.
        agent_id: The agent the batch belongs to, where the source knows it.
        metadata: The batch's metadata, where the source has it.
        deadline: Epoch seconds by which the batch must be answered, where it has one.
    """

    source: str
    batch_id: str
    call_id: str
    name: str
    arguments: Any
    turn_id: str = ""
    problem: str | None = None
    agent_id: str | None = None
    metadata: Mapping[str, str] | None = None
    deadline: float | None = None

    @property
    def ref(self) -> CallRef:
        """The call's identity in its source's ledger."""
        return CallRef(self.batch_id, self.turn_id, self.call_id)

    def to_wire(self) -> dict[str, Any]:
        """The message form: every field that is set, by name."""
        wire: dict[str, Any] = {
            "source": self.source,
            "batch_id": self.batch_id,
            "turn_id": self.turn_id,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
        }
        for field in ("problem", "agent_id", "metadata", "deadline"):
            value = getattr(self, field)
            if value is not None:
                wire[field] = dict(value) if field == "metadata" else value
        return wire

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Envelope:
        """Read a message's envelope.

        Raises:
            BadEnvelope: a field is missing or of the wrong type.
        """
        try:
            envelope = cls(
                source=wire["source"],
                batch_id=wire["batch_id"],
                turn_id=wire.get("turn_id", ""),
                call_id=wire["call_id"],
                name=wire["name"],
                arguments=wire.get("arguments"),
                problem=wire.get("problem"),
                agent_id=wire.get("agent_id"),
                metadata=wire.get("metadata"),
                deadline=wire.get("deadline"),
            )
        except (KeyError, TypeError) as exc:
            raise BadEnvelope(f"not a call envelope: missing {exc}") from exc
        ids = (envelope.source, envelope.batch_id, envelope.turn_id, envelope.call_id)
        if not all(isinstance(i, str) for i in ids) or not isinstance(envelope.name, str):
            raise BadEnvelope("not a call envelope: ids and name must be strings")
        return envelope

    @classmethod
    def from_legacy(cls, args: tuple[Any, ...]) -> Envelope:
        """The envelope of a positional message of the version before envelopes.

        Raises:
            BadEnvelope: the arguments are not ``(session, turn, call, name, arguments[,
                problem])``.
        """
        if not 5 <= len(args) <= 6:
            raise BadEnvelope(f"not a call: {len(args)} positional arguments")
        session, turn, call, name, arguments = args[:5]
        problem = args[5] if len(args) == 6 else None
        return cls.from_wire(
            {
                "source": LEGACY_SOURCE,
                "batch_id": session,
                "turn_id": turn,
                "call_id": call,
                "name": name,
                "arguments": arguments,
                "problem": problem,
            }
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """The envelope of one batch's delivery: what a ``submit`` message carries, by name.

    Attributes:
        source: The source that delivers it.
        batch_id: The batch.
        token: The claim token of the dispatch that sent it (a later dispatch's submit
            wins; this one then stands down).
        calls: The (turn id, call id) of every call the batch answers.
        lease_ms: The claim's lease, renewed while delivering.
        first_seen: When the batch was first dispatched (for the time-to-submit metric).
    """

    source: str
    batch_id: str
    token: str
    calls: tuple[tuple[str, str], ...]
    lease_ms: int
    first_seen: float | None = None

    def to_wire(self) -> dict[str, Any]:
        """The message form, by name."""
        wire: dict[str, Any] = {
            "source": self.source,
            "batch_id": self.batch_id,
            "token": self.token,
            "calls": [list(c) for c in self.calls],
            "lease_ms": self.lease_ms,
        }
        if self.first_seen is not None:
            wire["first_seen"] = self.first_seen
        return wire

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Delivery:
        """Read a message's delivery envelope.

        Raises:
            BadEnvelope: a field is missing or of the wrong type.
        """
        missing = [k for k in ("source", "batch_id", "token", "lease_ms") if wire.get(k) is None]
        if missing:
            raise BadEnvelope(f"not a delivery envelope: no {', '.join(missing)}")
        try:
            calls = tuple((str(t), str(c)) for t, c in wire["calls"])
            return cls(
                source=str(wire["source"]),
                batch_id=str(wire["batch_id"]),
                token=str(wire["token"]),
                calls=calls,
                lease_ms=int(wire["lease_ms"]),
                first_seen=wire.get("first_seen"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BadEnvelope(f"not a delivery envelope: {exc}") from exc
