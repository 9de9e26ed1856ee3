"""One session's results as the batch the API receives: ordered, bounded, and keyed.

* **Order.** Events are sorted by (turn id, call id), so the same results always make the
  same body, however the API ordered the calls when they were dispatched.
* **Size.** A batch over ``TOOLFAN_MAX_BATCH_BYTES`` is shrunk fairly: the largest outputs
  are cut (with a marker) to a common share, and what cannot be cut (a content array) is
  replaced by an error saying so; small results stay whole.
* **Key.** The ``Idempotency-Key`` is a digest of the session id and the exact body: a
  retry of the same batch carries the same key, and a batch that changed (a refused result
  replaced, see :mod:`tasks.submit`) carries a new one, since an API refuses a key reused
  with a different body. JSON encodes both parts injectively, so distinct batches never
  share a key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dispatcher.client import events_body
from dispatcher.models import tool_result_event
from handlers.text import clip

#: Rounds of cutting before whatever is still too large becomes an error.
FIT_ROUNDS = 4
#: The share below which an output is never cut (it is small whatever the batch).
MIN_SHARE = 256


def batch_key(session_id: str, body: bytes) -> str:
    """The batch's ``Idempotency-Key``: same session and body, same key."""
    digest = hashlib.sha256(json.dumps(session_id).encode() + b"\n" + body).hexdigest()
    return f"toolfan-{digest[:40]}"


def event_of(result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tool_result`` event of one result payload."""
    return tool_result_event(
        result["turn_id"],
        result["call_id"],
        success=bool(result["success"]),
        output=result.get("output"),
        error=result.get("error"),
    )


def build_body(
    results: Sequence[Mapping[str, Any]], max_bytes: int
) -> tuple[list[tuple[str, str]], bytes]:
    """The batch body of ``results`` within ``max_bytes``, and the (turn, call) of each event.

    Returns:
        The (turn id, call id) pairs in the order of the body's events, and the body.
    """
    ordered = sorted(results, key=lambda r: (r["turn_id"], r["call_id"]))
    events = [event_of(r) for r in ordered]
    body = events_body(events)
    for _ in range(FIT_ROUNDS):
        if len(body) <= max_bytes:
            break
        events = _shrink(events, len(body) - max_bytes, max_bytes)
        body = events_body(events)
    if len(body) > max_bytes:
        events = [_too_large(e, max_bytes) if _payload(e) > MIN_SHARE else e for e in events]
        body = events_body(events)
    return [(e["turn_id"], e["call_id"]) for e in events], body


def _payload(event: Mapping[str, Any]) -> int:
    """The sent size of an event's output or error (what cutting can save)."""
    value = event.get("output") if event["success"] else event.get("error")
    return len(json.dumps(value))


def _share(sizes: list[int], excess: int) -> int:
    """The largest cap whose cutting removes at least ``excess`` bytes (water filling)."""
    low, high = MIN_SHARE, max(sizes)
    while low < high:
        cap = (low + high + 1) // 2
        if sum(s - cap for s in sizes if s > cap) >= excess:
            low = cap
        else:
            high = cap - 1
    return low


def _shrink(events: list[dict[str, Any]], excess: int, limit: int) -> list[dict[str, Any]]:
    sizes = [_payload(e) for e in events]
    cap = _share(sizes, excess)
    return [
        _cut(e, cap, size, limit) if size > cap else e
        for e, size in zip(events, sizes, strict=True)
    ]


def _cut(event: dict[str, Any], cap: int, size: int, limit: int) -> dict[str, Any]:
    """The event with its text cut to about ``cap`` sent bytes; content arrays give way."""
    field = "output" if event["success"] else "error"
    text = event.get(field)
    if not isinstance(text, str):
        return _too_large(event, limit)
    keep = max(MIN_SHARE // 2, len(text) * cap // max(size, 1))
    note = "characters"
    return {**event, field: clip(text, keep, f"{note}; the batch was over its size limit")}


def _too_large(event: dict[str, Any], limit: int) -> dict[str, Any]:
    return tool_result_event(
        event["turn_id"],
        event["call_id"],
        success=False,
        error=(
            "The function's result did not fit in the batch of results "
            f"(TOOLFAN_MAX_BATCH_BYTES={limit:,}); it was left out"
        ),
    )
