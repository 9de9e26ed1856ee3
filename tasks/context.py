"""The :class:`~handlers.context.CallContext` of a call the engine runs, from its envelope.

Everything in it comes from the source (the session or run as the API described it) or
from the ledger (the attempt), never from the model's arguments. The envelope crossed the
broker, so each field is taken only if it has its type: a hostile or garbled message
yields an emptier context, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from handlers.context import CallContext, frozen, idempotency_key
from handlers.jsonsafe import string_pairs
from tasks import sources
from tasks.envelope import Envelope


def batch_ids(source: str, batch_id: str) -> dict[str, str]:
    """The batch's own ids by name, as its source reads its batch id (none if it cannot)."""
    try:
        reader = getattr(sources.get(source), "batch_ids", None)
    except sources.UnknownSource:
        return {}
    if reader is None:
        return {}
    try:
        ids = reader(batch_id)
    except ValueError:
        return {}
    return string_pairs(ids)


def context_of(envelope: Envelope, attempt: int) -> CallContext:
    """The context of the call ``envelope`` carries, on its ``attempt``-th delivery."""
    return CallContext(
        source=envelope.source,
        batch_id=envelope.batch_id,
        turn_id=envelope.turn_id,
        call_id=envelope.call_id,
        function=envelope.name,
        agent_id=envelope.agent_id if isinstance(envelope.agent_id, str) else None,
        metadata=frozen(_pairs(envelope.metadata)),
        attempt=max(1, attempt),
        deadline=_seconds(envelope.deadline),
        idempotency_key=idempotency_key(
            envelope.source, envelope.batch_id, envelope.turn_id, envelope.call_id
        ),
        ids=frozen(batch_ids(envelope.source, envelope.batch_id)),
    )


def _pairs(value: Mapping[str, str] | None) -> dict[str, str]:
    return string_pairs(value) if value else {}


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
