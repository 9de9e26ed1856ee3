"""What a polling process dispatched itself, so it need not re-read those calls every pass.

A source keeps listing a batch until its answer is applied, so under a backlog every pass
meets the same in-flight batches again. Reading their claim, dispatch record and every
call's state each time is most of a busy poller's ledger traffic. A batch this process
dispatched is known to be in flight while two things hold: its claim still carries the
token this process wrote (one GET per batch, not two reads plus one per call), and its
dispatch is neither stale nor near its actions' expiry, the two cases a poller must act
on. Past that moment the batch is read in full again, as any other.

A worker on threads runs several push and poll tasks of one process at once, all on the
process's one poller, so the memo takes a lock around each use: entries expire and are
forgotten by one thread while another reads them.

A poll pass forgets the dispatches past their moment as it ends, but a worker that only
runs push tasks makes no pass: there the memo sweeps them out itself, every
:data:`SWEEP_EVERY` seconds as it remembers another. Without that, a push-only process's
memo filled up to :data:`LIMIT` with dispatches long answered (90 MB of two-call
sessions): in a 30-minute soak with every session pushed, a worker on threads grew by
15 MB, 12.5 %.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

#: Batches remembered at most; the oldest are forgotten first (they are read in full).
LIMIT = 100_000
#: Seconds between the sweeps :meth:`DispatchMemo.remember` makes of entries past their
#: moment (one scan of the memo; a poll pass's own prune comes far more often).
SWEEP_EVERY = 30.0


@dataclass(frozen=True)
class Dispatched:
    """One batch's dispatch by this process: its claim token and the calls it covers."""

    token: str
    calls: frozenset[tuple[str, str]]
    until: float


class DispatchMemo:
    """Batches this process claimed and dispatched, until their dispatch needs a look."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._entries: dict[str, Dispatched] = {}
        self._lock = threading.Lock()
        self._next_sweep = time.time() + SWEEP_EVERY

    def remember(
        self, batch_id: str, token: str, calls: Iterable[tuple[str, str]], until: float
    ) -> None:
        """Trust ``token``'s claim on these calls until ``until`` (``time.time()``)."""
        now = time.time()
        if until <= now:
            return
        entry = Dispatched(token, frozenset(calls), until)
        with self._lock:
            self._entries.pop(batch_id, None)
            self._entries[batch_id] = entry
            while len(self._entries) > self._limit:
                del self._entries[next(iter(self._entries))]
            if now >= self._next_sweep:
                self._forget_past(now)

    def prune(self) -> None:
        """Forget dispatches past their moment (their batches may never be listed again)."""
        with self._lock:
            self._forget_past(time.time())

    def _forget_past(self, now: float) -> None:
        """Forget the entries past their moment (the lock held), and when to sweep next."""
        for batch_id in [s for s, e in self._entries.items() if now >= e.until]:
            del self._entries[batch_id]
        self._next_sweep = now + SWEEP_EVERY

    def knows(self, batch_id: str) -> bool:
        """Whether the batch is remembered and not yet due for a full read."""
        entry = self._entries.get(batch_id)  # one read: atomic without the lock
        return entry is not None and time.time() < entry.until

    def candidates(self, batch_ids: Iterable[str]) -> list[str]:
        """The batches worth a claim check: remembered and not yet due for a full read."""
        now, wanted = time.time(), list(batch_ids)  # read before the lock: it may be lazy
        found = []
        with self._lock:
            for batch_id in wanted:
                entry = self._entries.get(batch_id)
                if entry is None:
                    continue
                if now >= entry.until:
                    del self._entries[batch_id]
                    continue
                found.append(batch_id)
        return found

    def in_flight(self, batch_id: str, owner: str | None, calls: Iterable[tuple[str, str]]) -> bool:
        """Whether the batch's claim is still ours and covers every listed call.

        A claim held by another token, or none at all (submitted, abandoned, expired),
        means the batch must be read in full; so does a call this process never sent.
        """
        with self._lock:
            entry = self._entries.get(batch_id)
            if entry is None or owner != entry.token or time.time() >= entry.until:
                self._entries.pop(batch_id, None)
                return False
        return entry.calls.issuperset(calls)

    def clear(self) -> None:
        """Forget every dispatch: each batch is read in full on the next pass."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
