"""Cursor pages of runs and threads: ``limit``, ``order``, ``after``, ``before``.

The page is the OpenAI list object ``{"object": "list", "data", "first_id", "last_id",
"has_more"}``. The official ``openai`` SDK pages by ``has_more`` and the last item's id;
``azure-ai-agents`` pages by ``last_id`` alone (``ItemPaged`` stops only on a falsy
continuation token), so its flavour ends the last page with ``last_id: null``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from emulator.wire import JSON, WireError


@dataclass(frozen=True)
class PageQuery:
    """The parsed query of a list call."""

    limit: int = 20
    order: str = "desc"
    after: str | None = None
    before: str | None = None


def _bad(message: str, param: str, code: str = "invalid_value") -> WireError:
    return WireError(400, message, code=code, param=param)


def _limit(raw: str | None) -> int:
    if raw is None:
        return 20
    try:
        limit = int(raw)
    except ValueError:
        raise _bad(
            f"Invalid 'limit': expected an integer, got '{raw}'.", "limit", "invalid_type"
        ) from None
    if not 1 <= limit <= 100:
        raise _bad(f"Invalid 'limit': must be between 1 and 100, got {limit}.", "limit")
    return limit


def parse_page_query(items: Sequence[tuple[str, str]]) -> PageQuery:
    """Parse ``limit`` (1..100, default 20), ``order`` (default ``desc``), the cursors."""
    plain = dict(items)
    order = plain.get("order", "desc")
    if order not in {"asc", "desc"}:
        raise _bad(f"Invalid 'order': expected 'asc' or 'desc', got '{order}'.", "order")
    return PageQuery(
        limit=_limit(plain.get("limit")),
        order=order,
        after=plain.get("after") or None,
        before=plain.get("before") or None,
    )


def _position(ids: list[str], cursor: str, param: str, noun: str) -> int:
    if cursor not in ids:
        raise _bad(f"Invalid '{param}': no {noun} with id '{cursor}'.", param)
    return ids.index(cursor)


def cursor_page(
    items: Sequence[tuple[str, JSON]], query: PageQuery, *, noun: str, null_last_id: bool
) -> JSON:
    """One page of ``items`` (``(id, object)`` pairs, oldest first).

    The window lies strictly between ``after`` and ``before`` in the query's order; the page
    is its first ``limit`` items, or its last ones when only ``before`` is given (the page
    just before that cursor). ``null_last_id`` sends ``last_id: null`` when nothing follows.
    """
    ordered = list(items) if query.order == "asc" else list(reversed(items))
    ids = [item_id for item_id, _ in ordered]
    start = 0 if query.after is None else _position(ids, query.after, "after", noun) + 1
    end = len(ids) if query.before is None else _position(ids, query.before, "before", noun)
    window = ordered[start:end] if start < end else []
    backwards = query.before is not None and query.after is None
    chosen = window[-query.limit :] if backwards else window[: query.limit]
    has_more = len(window) > len(chosen)
    chosen_ids = [item_id for item_id, _ in chosen]
    last_id = chosen_ids[-1] if chosen_ids else None
    return {
        "object": "list",
        "data": [obj for _, obj in chosen],
        "first_id": chosen_ids[0] if chosen_ids else None,
        "last_id": None if null_last_id and not has_more else last_id,
        "has_more": has_more,
    }
