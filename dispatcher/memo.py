"""What a polling process dispatched itself, so it need not re-read those calls every pass.

The API keeps listing a session until its batch is applied, so under a backlog every pass
meets the same in-flight sessions again. Reading their claim, dispatch record and every
call's state each time is most of a busy poller's ledger traffic. A session this process
dispatched is known to be in flight while two things hold: its claim still carries the
token this process wrote (one GET per session, not two reads plus one per call), and its
dispatch is neither stale nor near its actions' expiry, the two cases a poller must act
on. Past that moment the session is read in full again, as any other.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

#: Sessions remembered at most; the oldest are forgotten first (they are read in full).
LIMIT = 100_000


@dataclass(frozen=True)
class Dispatched:
    """One session's dispatch by this process: its claim token and the calls it covers."""

    token: str
    calls: frozenset[tuple[str, str]]
    until: float


class DispatchMemo:
    """Sessions this process claimed and dispatched, until their dispatch needs a look."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._entries: dict[str, Dispatched] = {}

    def remember(
        self, session_id: str, token: str, calls: Iterable[tuple[str, str]], until: float
    ) -> None:
        """Trust ``token``'s claim on these calls until ``until`` (``time.time()``)."""
        if until <= time.time():
            return
        self._entries.pop(session_id, None)
        self._entries[session_id] = Dispatched(token, frozenset(calls), until)
        while len(self._entries) > self._limit:
            del self._entries[next(iter(self._entries))]

    def prune(self) -> None:
        """Forget dispatches past their moment (their sessions may never be listed again)."""
        now = time.time()
        for session_id in [s for s, e in self._entries.items() if now >= e.until]:
            del self._entries[session_id]

    def candidates(self, session_ids: Iterable[str]) -> list[str]:
        """The sessions worth a claim check: remembered and not yet due for a full read."""
        now = time.time()
        found = []
        for session_id in session_ids:
            entry = self._entries.get(session_id)
            if entry is None:
                continue
            if now >= entry.until:
                del self._entries[session_id]
                continue
            found.append(session_id)
        return found

    def in_flight(
        self, session_id: str, owner: str | None, calls: Iterable[tuple[str, str]]
    ) -> bool:
        """Whether the session's claim is still ours and covers every listed call.

        A claim held by another token, or none at all (submitted, abandoned, expired),
        means the session must be read in full; so does a call this process never sent.
        """
        entry = self._entries.get(session_id)
        if entry is None or owner != entry.token or time.time() >= entry.until:
            self._entries.pop(session_id, None)
            return False
        return entry.calls.issuperset(calls)

    def clear(self) -> None:
        """Forget every dispatch: each session is read in full on the next pass."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
