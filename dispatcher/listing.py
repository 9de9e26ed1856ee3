"""Walking the session list page by page, so that no answer can hang or stop a pass.

The list endpoint pages with a cursor (``after=<id of the last item>``). An API that
repeats a cursor, or keeps saying ``has_more`` forever, would keep a naive loop busy for
good; a pass that never ends also never lets the poller stop. So a listing remembers the
cursors it sent, counts pages and seconds against a budget, and asks a stop callback before
each page; whichever ends it first is named in :attr:`Listing.cut`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dispatcher.models import BadSession, Glanced, Session, parse_session

Fetch = Callable[[list[tuple[str, str]]], tuple[list[Any], bool]]
#: Reads a listed entry's ids only, when that may be enough (see :class:`Glanced`).
Glance = Callable[[Any], Glanced | None]


@dataclass(frozen=True)
class ListBudget:
    """How far one listing may go.

    Attributes:
        max_pages: Pages read at most (100 sessions each).
        max_seconds: Seconds at most, counted from the first page.
        stop: Asked before each page; True ends the listing (a signal, a shutdown).
    """

    max_pages: int = 10_000
    max_seconds: float = 300.0
    stop: Callable[[], bool] | None = None


class Listing:
    """The entries of a session list, each a :class:`Session` or a :class:`BadSession`.

    With a ``glance``, an entry it recognizes comes as its :class:`Glanced` ids instead,
    to be read in full only if the caller needs it.

    Attributes:
        cut: Why the listing ended before the API's last page, or None.
        last_id: The id of the last entry read, to resume from after a cut.
        pages: Pages read so far.
    """

    def __init__(
        self,
        fetch: Fetch,
        params: list[tuple[str, str]],
        budget: ListBudget,
        after: str | None,
        sendable: Callable[[str], bool] = lambda cursor: True,
        glance: Glance | None = None,
    ) -> None:
        self._fetch = fetch
        self._glance = glance
        self._sendable = sendable
        self._params = params
        self._budget = budget
        self._after = after
        self.cut: str | None = None
        self.last_id: str | None = after
        self.pages = 0

    def __iter__(self) -> Iterator[Session | BadSession | Glanced]:
        started = time.monotonic()
        sent: set[str | None] = set()
        while True:
            self.cut = self._over_budget(started)
            if self.cut is not None:
                return
            sent.add(self._after)
            data, has_more = self._fetch(
                self._params + ([("after", self._after)] if self._after else [])
            )
            self.pages += 1
            yield from (self._read(raw) for raw in data)
            if not has_more or not data:
                return
            following = self._cursor(data, sent)
            if following is None:
                self.cut = "no entry of a page has an id to continue from"
                return
            if following in sent:
                self.cut = f"the API repeated the cursor {following[:100]!r}"
                return
            self._after = self.last_id = following

    def _read(self, raw: Any) -> Session | BadSession | Glanced:
        glanced = self._glance(raw) if self._glance is not None else None
        return glanced if glanced is not None else parse_session(raw)

    def _cursor(self, data: list[Any], sent: set[str | None]) -> str | None:
        """The id to continue after: the last entry's, else the last one a URL can carry.

        Continuing from an earlier entry reads the page's tail again, which is harmless
        (a session already claimed is skipped); stopping would hide every later session.
        """
        ids = [_id_of(raw) for raw in reversed(data)]
        last = ids[0] if ids else None
        if last is not None and (last in sent or self._sendable(last)):
            return last
        usable = (i for i in ids if i is not None and i not in sent and self._sendable(i))
        return next(usable, None)

    def _over_budget(self, started: float) -> str | None:
        budget = self._budget
        if budget.stop is not None and budget.stop():
            return "stopping"
        if self.pages >= budget.max_pages:
            return f"the page budget of {budget.max_pages:,} pages ran out"
        if self.pages and time.monotonic() - started >= budget.max_seconds:
            return f"the time budget of {budget.max_seconds:g} s ran out"
        return None


def _id_of(raw: Any) -> str | None:
    ident = raw.get("id") if isinstance(raw, dict) else None
    return ident if isinstance(ident, str) and ident else None
