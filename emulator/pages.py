"""``GET /agents/sessions``: one cursor page over the sessions, and the page faults.

The page faults make the list misbehave the way a broken or hostile API might, so a client
can prove it neither loops forever nor crashes: ``list_repeat_cursor`` never advances,
``list_endless`` never ends, ``list_garbage`` answers a body that is no page at all.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from emulator.faults import Faults
from emulator.jsontext import dumps
from emulator.sessions import Session
from emulator.validation import ListQuery
from emulator.wire import JSON, WireError

#: Synthetic sessions of ``list_endless`` are named ``sess_endless_<12 digits>``, from 1 up.
SYNTHETIC_PREFIX = "sess_endless_"
_SYNTHETIC = re.compile(rf"{SYNTHETIC_PREFIX}([0-9]{{12}})")
#: How deep the ``deep`` garbage body nests.
GARBAGE_DEPTH = 5000


def _matches(session: Session, query: ListQuery) -> bool:
    if query.agent_id is not None and session.agent_id != query.agent_id:
        return False
    return all(session.metadata.get(k) == v for k, v in query.metadata.items())


def _after_cursor(
    sessions: list[Session], query: ListQuery, endless: bool
) -> tuple[list[Session], int]:
    """The matching sessions after the cursor, and the first synthetic number to follow them.

    With ``endless`` the list is the real sessions followed by synthetic ones numbered from
    1, so a cursor may name either; a real id wins over a synthetic-looking one.
    """
    ordered = sorted(sessions, key=lambda s: s.seq, reverse=query.order == "desc")
    if query.after is not None:
        ids = [s.id for s in ordered]
        if query.after in ids:
            ordered = ordered[ids.index(query.after) + 1 :]
        else:
            synthetic = _SYNTHETIC.fullmatch(query.after) if endless else None
            if synthetic is None:
                raise WireError(
                    400, f"Invalid 'after': no session with id '{query.after}'.", param="after"
                )
            return [], int(synthetic.group(1)) + 1
    return [s for s in ordered if _matches(s, query)], 1


def _synthetic(number: int, query: ListQuery, now: float) -> JSON:
    """A fresh idle session that exists only on the page (retrieving it answers 404)."""
    session = Session.new(
        f"{SYNTHETIC_PREFIX}{number:012d}",
        0,
        query.agent_id or "agent_emulated",
        query.metadata,
        [],
    )
    return session.to_json(now)


def page(
    sessions: list[Session], query: ListQuery, now: float, turn_duration: float, faults: Faults
) -> JSON:
    """One page, ordered by creation, after the cursor, with ``faults``' page faults applied.

    ``list_repeat_cursor`` ignores the cursor and always claims more; ``list_endless`` fills
    every page past the real sessions with synthetic ones and always claims more. The
    cursor fields (``first_id``, ``last_id``) name the real ids even if a raw field replaces
    a session's served ``id``.
    """
    repeat, endless = faults.list_repeat_cursor, faults.list_endless
    if repeat:
        query = dataclasses.replace(query, after=None)
    matching, synthetic_from = _after_cursor(sessions, query, endless)
    chosen = matching[: query.limit]
    for session in chosen:
        session.settle(now, turn_duration)
    data: list[Any] = [s.text(now) for s in chosen]
    ids = [s.id for s in chosen]
    if endless:
        numbers = range(synthetic_from, synthetic_from + query.limit - len(chosen))
        data.extend(_synthetic(n, query, now) for n in numbers)
        ids.extend(f"{SYNTHETIC_PREFIX}{n:012d}" for n in numbers)
    return {
        "object": "list",
        "data": data,
        "first_id": ids[0] if ids else None,
        "last_id": ids[-1] if ids else None,
        "has_more": repeat or endless or len(matching) > len(chosen),
    }


def garbage_body(kind: str, listed: JSON) -> str:
    """The ``list_garbage`` answer of kind ``kind`` in place of the page ``listed``.

    ``not_json`` is no JSON at all; ``deep`` is a list object whose ``data`` nests so deep
    that a recursive parser gives up (the whole body is ``GARBAGE_DEPTH`` levels deep);
    ``array`` is the page's sessions as a bare JSON array instead of the list object.
    """
    if kind == "not_json":
        return "not json"
    if kind == "deep":
        inner = GARBAGE_DEPTH - 1
        return (
            '{"object":"list","data":'
            + "[" * inner
            + "]" * inner
            + ',"first_id":null,"last_id":null,"has_more":false}'
        )
    if kind == "array":
        return dumps(listed["data"])
    raise ValueError(f"unknown list_garbage {kind!r}")
