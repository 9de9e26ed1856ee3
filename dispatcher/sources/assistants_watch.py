"""The runs toolfan watches: the Assistants protocol has no list of waiting runs.

OpenAI and Azure OpenAI list no threads, so the application names the runs it starts
(``toolfan runs watch``, :func:`toolfan.watch_run`, ``POST /runs/watch``). Each watch is
one field of one Redis hash, keyed by the run's batch id; the poller reads them all every
pass (one ``HGETALL``) and drops a watch once its run is over or past its ``expires_at``.
A watch that adds runs rings :mod:`dispatcher.wake`'s bell, so a looping poller reads them
at once.
The hash also keeps the status each run had when last seen, for ``toolfan runs list``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

import redis

from dispatcher.models import addressable
from dispatcher.sources.assistants import NAME, batch_id, run_of
from dispatcher.wake import ring
from tasks import keys

#: The hash of watched runs: batch id to ``{"since", "status", "seen_at"}``.
WATCHES = f"{keys.scope(NAME)}:watches"
#: Most runs one watch command may add (a typo'd loop must not fill Redis).
MAX_PER_CALL = 10_000


@dataclass(frozen=True)
class Watch:
    """One watched run and what the poller last saw of it."""

    thread_id: str
    run_id: str
    since: float
    status: str | None = None
    seen_at: float | None = None

    @cached_property
    def batch_id(self) -> str:
        """The batch id of the run's phases (spelled once: a pass asks it several times)."""
        return batch_id(self.thread_id, self.run_id)


class Watches:
    """The watched runs, in the ledger's Redis.

    A poller reads every watch on every pass (five a second with ``--interval 0.2``), while
    most of them have not changed since the last: each field's parse is kept for as long as
    its field and value stay the same, so a pass over thousands of runs in flight parses
    only the new ones.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        #: Field -> (value, its parse), as of the last :meth:`all`.
        self._parsed: dict[str, tuple[str, Watch | None]] = {}

    def add(self, runs: Iterable[tuple[str, str]]) -> int:
        """Watch these runs (again: a watch is kept, not reset); how many are new."""
        pairs = list(runs)
        if len(pairs) > MAX_PER_CALL:
            raise ValueError(f"at most {MAX_PER_CALL} runs per call")
        for thread_id, run_id in pairs:
            _check_ids(thread_id, run_id)
        now = time.time()
        pipe = self.client.pipeline(transaction=False)
        for thread_id, run_id in pairs:
            pipe.hsetnx(WATCHES, batch_id(thread_id, run_id), json.dumps({"since": now}))
        added = sum(1 for new in pipe.execute() if new)
        if added:  # a looping poller reads them now, not a whole interval later
            ring(self.client)
        return added

    def all(self) -> list[Watch]:
        """Every watch, oldest first."""
        raw = cast(dict[str, str], self.client.hgetall(WATCHES))
        before: dict[str, tuple[str, Watch | None]] = self._parsed
        parsed: dict[str, tuple[str, Watch | None]] = {}
        for key, value in raw.items():
            known = before.get(key)
            if known is None or known[0] != value:
                known = (value, _watch(key, value))
            parsed[key] = known
        self._parsed = parsed
        watches = [w for _, w in parsed.values() if w is not None]
        return sorted(watches, key=lambda w: w.since)

    def record(self, seen: Sequence[tuple[Watch, str]], dropped: Sequence[str]) -> None:
        """Remember the statuses ``seen``, and end the watches ``dropped``, in one trip.

        ``dropped`` names runs by batch id. A pass reads hundreds of runs, and most reads
        change a status or end a watch: one round trip each cost a runs poller about a
        seventh of its time.
        """
        if not seen and not dropped:
            return
        now = time.time()
        pipe = self.client.pipeline(transaction=False)
        for watch, status in seen:
            value = {"since": watch.since, "status": status, "seen_at": now}
            pipe.hset(WATCHES, watch.batch_id, json.dumps(value))
        if dropped:
            pipe.hdel(WATCHES, *dropped)
        pipe.execute()

    def __len__(self) -> int:
        return int(self.client.hlen(WATCHES))


def _check_ids(thread_id: Any, run_id: Any) -> None:
    """Refuse a run no request could read: the poller would fail on it every pass.

    Raises:
        ValueError: an id is not a string, is empty, is a dot-segment (``.``, ``..``), or
            is too long for a URL.
    """
    for what, ident in (("thread id", thread_id), ("run id", run_id)):
        if not isinstance(ident, str) or not addressable(ident):
            shown = repr(ident)[:80]
            raise ValueError(
                f"{what} {shown} cannot name a run: a run is named by a non-empty thread id "
                "and run id that a URL can carry (not '.' or '..', not over 64 KiB)"
            )


def _watch(key: Any, value: Any) -> Watch | None:
    try:
        thread_id, run_id = run_of(str(key))
        data = json.loads(value)
        return Watch(
            thread_id,
            run_id,
            float(data["since"]),
            data.get("status"),
            data.get("seen_at"),
        )
    except (ValueError, KeyError, TypeError):
        return None
