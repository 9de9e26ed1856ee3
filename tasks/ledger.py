"""The Redis ledger: what became of each call, and who owns each batch right now.

A ledger is scoped to one source (:mod:`tasks.sources`): its keys carry the source's
name, so batches of different protocols never share a record even when their ids match.
A record per (batch, turn, call) says whether the call started or finished, holds the
saved result, and counts attempts (a source without turns uses an empty turn). Every
update is one Lua script, so a redelivered task racing the original sees either no result
or the one saved result, never half of one.
Batch claims are leases: an owner token with a TTL, released by compare-and-delete so
a slow owner can never free a claim that has since passed to someone else.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote

import redis

from handlers.errors import ToolfanError
from handlers.result import CallResult
from handlers.text import scrub
from tasks import keys, metrics
from tasks.lua import LuaScript, ScriptConnections, script_connections
from tasks.scripts import (
    BEGIN,
    CLAIM,
    EXTEND,
    FINISH,
    MARK_SUBMITTED,
    PARK,
    RECLAIM,
    RELEASE,
    REOPEN,
    REPLACE,
    TAKEOVER,
    finish_then,
)

STARTED, DONE, SUBMITTED, ABANDONED = "started", "done", "submitted", "abandoned"
#: States after which the API has had its answer (or refused it for good): never re-sent.
FINAL_STATES = frozenset({SUBMITTED, ABANDONED})
#: Claims read by one MGET: a page of sessions is 100; runs watched may be thousands, and
#: one command over that many keys would hold Redis up for the others.
MGET_KEYS = 500


class LedgerError(ToolfanError):
    """The ledger could not be read or updated (Redis unreachable or refusing)."""


@dataclass(frozen=True)
class CallRef:
    """The identity of one function call within a batch (its source is the ledger's)."""

    batch_id: str
    turn_id: str
    call_id: str

    @property
    def ids(self) -> str:
        """The ids as stored in the call's record: a JSON array, ASCII-escaped.

        Every id, lone surrogates included, is kept exactly, and any client can read it.
        """
        return json.dumps([self.batch_id, self.turn_id, self.call_id])

    @property
    def ids_tuple(self) -> tuple[str, str, str]:
        """The three ids."""
        return self.batch_id, self.turn_id, self.call_id


@dataclass(frozen=True)
class Begin:
    """What the ledger knew when an execution began.

    ``saved`` is the saved result when the call already finished; otherwise ``attempts``
    counts this attempt too, so ``attempts > 1`` means an earlier attempt started and
    left no result (a crash or a redelivery).
    """

    saved: CallResult | None
    attempts: int
    previous_worker: str | None = None
    ended: str | None = None
    """Why the call's batch ended before it was answered, if it did: the call is not run."""


@dataclass(frozen=True)
class CallStatus:
    """The two things the poller needs about a call: its state and its saved result."""

    state: str | None
    result: CallResult | None


@dataclass(frozen=True)
class Dispatch:
    """A batch's latest dispatch: who owns it, when it started, and when actions expire."""

    token: str
    dispatched_at: float
    lease_ms: int
    expires_at: float | None = None
    first_seen: float | None = None

    @classmethod
    def from_hash(cls, raw: dict[str, str]) -> Dispatch | None:
        """Read a stored dispatch hash; None when absent or unreadable."""
        try:
            return cls(
                raw["token"],
                float(raw["dispatched_at"]),
                int(raw["lease_ms"]),
                _float(raw.get("expires_at")),
                _float(raw.get("first_seen")),
            )
        except (KeyError, ValueError):
            return None

    def to_hash(self) -> dict[str, str | float]:
        """The stored form: every field, an absent one as "".

        So a new dispatch's HSET replaces all of the previous one's, and neither the claim
        nor a takeover needs a DEL before it.
        """
        return {
            "token": self.token,
            "dispatched_at": self.dispatched_at,
            "lease_ms": self.lease_ms,
            "expires_at": "" if self.expires_at is None else self.expires_at,
            "first_seen": "" if self.first_seen is None else self.first_seen,
        }


@dataclass(frozen=True)
class BatchView:
    """One batch as the ledger sees it: its claim, its dispatch, and given calls."""

    claim_owner: str | None
    dispatch: Dispatch | None
    calls: list[CallStatus]


@dataclass(frozen=True)
class CallRecord:
    """The ledger's full view of one call, its ids as the API sent them."""

    batch_id: str
    turn_id: str
    call_id: str
    state: str
    attempts: int
    name: str | None
    result: CallResult | None
    first_started_at: float | None
    started_at: float | None
    finished_at: float | None
    submitted_at: float | None = None
    submission_key: str | None = None
    abandon_reason: str | None = None
    refused_reason: str | None = None


#: What :meth:`Ledger.finish_then` returns for its second part when that did not run.
NOT_RUN: Any = object()


class Ledger:
    """Call records and batch claims of one source in Redis."""

    def __init__(
        self,
        client: redis.Redis,
        ttl: int,
        source: str,
        batches_end: bool = False,
        scripts: ScriptConnections | None = None,
    ) -> None:
        """A ledger on ``client``; ``scripts``, that client's kept connections, if shared."""
        self.client = client
        self.ttl = ttl
        self.source = source
        #: Whether this source's batches can end unanswered (then ``begin`` checks).
        self.batches_end = batches_end
        if scripts is None:
            scripts = script_connections(client)
        self._scripts = scripts
        self._begin = LuaScript(client, BEGIN, scripts)
        self._park = LuaScript(client, PARK, scripts)
        self._extend = LuaScript(client, EXTEND, scripts)
        self._finish = LuaScript(client, FINISH, scripts)
        self._submitted = LuaScript(client, MARK_SUBMITTED, scripts)
        self._claim = LuaScript(client, CLAIM, scripts)
        self._release = LuaScript(client, RELEASE, scripts)
        self._reclaim = LuaScript(client, RECLAIM, scripts)
        self._takeover = LuaScript(client, TAKEOVER, scripts)
        self._replace = LuaScript(client, REPLACE, scripts)
        self._reopen = LuaScript(client, REOPEN, scripts)
        #: :meth:`finish_then`'s scripts, by the source of their second part.
        self._then: dict[str, LuaScript] = {}

    @classmethod
    def from_url(cls, url: str, ttl: int, source: str) -> Ledger:
        """A ledger of ``source`` on the Redis at ``url``."""
        return cls(redis.Redis.from_url(url, decode_responses=True), ttl, source)

    def scoped(self, source: str, batches_end: bool = False) -> Ledger:
        """The same Redis and settings, for another source's batches."""
        if source == self.source and batches_end == self.batches_end:
            return self
        return Ledger(self.client, self.ttl, source, batches_end, self._scripts)

    def key(self, ref: CallRef) -> str:
        """The key of a call's record."""
        return keys.call(self.source, ref.batch_id, ref.turn_id, ref.call_id)

    def _claim_key(self, batch_id: str) -> str:
        return keys.claim(self.source, batch_id)

    def _dispatch_key(self, batch_id: str) -> str:
        return keys.dispatch(self.source, batch_id)

    def begin(self, ref: CallRef, name: str, worker: str = "") -> Begin:
        """Mark an attempt started by ``worker``, unless the call has a saved result."""
        keys_ = [self.key(ref)]
        if self.batches_end:
            keys_.append(keys.gone(self.source, ref.batch_id))
        state, result, attempts, previous = self._run(
            self._begin, keys_, [time.time(), self.ttl, scrub(name), ref.ids, worker]
        )
        if state == "gone":
            return Begin(None, 0, None, str(result))
        saved = CallResult.model_validate_json(result) if state == "done" else None
        return Begin(saved, int(attempts), previous or None)

    def end_batch(self, batch_id: str, reason: str) -> None:
        """Say a batch ended unanswered: calls of it not yet begun will not run."""
        self._call(self.client.set, keys.gone(self.source, batch_id), scrub(reason), ex=self.ttl)

    def finish(self, ref: CallRef, result: CallResult) -> CallResult:
        """Save a result; the first saved result wins and is returned to every caller."""
        payload = result.stored()
        saved = self._run(self._finish, [self.key(ref)], [payload, time.time(), self.ttl, ref.ids])
        return result if saved == payload else CallResult.model_validate_json(saved)

    def finish_then(
        self, ref: CallRef, result: CallResult, then: str, keys_: list[str], args: list[Any]
    ) -> tuple[CallResult, Any]:
        """:meth:`finish`, and in the same script ``then`` (a script's source) if it saved.

        ``then`` runs on ``keys_`` and ``args`` only when ``result`` is the one saved
        (nothing was saved before it, or this same result, by a try whose reply was lost):
        returns that result and ``then``'s reply. When another copy saved a result of its
        own first, ``then`` does not run: returns that one and :data:`NOT_RUN`.
        """
        script = self._then.get(then)
        if script is None:
            script = self._then[then] = LuaScript(self.client, finish_then(then), self._scripts)
        payload = result.stored()
        ran, reply = self._run(
            script, [self.key(ref), *keys_], [payload, time.time(), self.ttl, ref.ids, *args]
        )
        if int(ran) == 1:
            return result, reply
        return CallResult.model_validate_json(reply), NOT_RUN

    def park(self, ref: CallRef, worker: str) -> bool:
        """Give back the start of a call ``worker`` began that now waits for its approval."""
        return bool(self._run(self._park, [self.key(ref)], [worker]))

    def extend_claim(self, batch_id: str, lease_ms: int) -> None:
        """Keep a batch's claim, and its dispatch's lease, ``lease_ms`` more at least.

        A call of it waits for approval: no poll may take the batch over meanwhile, nor
        count its claim as stale.
        """
        keys_ = [self._claim_key(batch_id), self._dispatch_key(batch_id)]
        self._run(self._extend, keys_, [lease_ms, int(time.time() * 1000)])

    def saved(self, ref: CallRef) -> CallResult | None:
        """The call's saved result, or None."""
        raw = cast(str | None, self._call(self.client.hget, self.key(ref), "result"))
        return CallResult.model_validate_json(raw) if raw else None

    def replace(self, ref: CallRef, result: CallResult, reason: str) -> bool:
        """Put ``result`` in place of a saved result the API refused; False if no record."""
        return bool(
            self._run(self._replace, [self.key(ref)], [result.stored(), time.time(), scrub(reason)])
        )

    def reopen(self, refs: Sequence[CallRef], states: Iterable[str] = FINAL_STATES) -> int:
        """Make final calls with a saved result sendable again; returns how many were."""
        if set(states) - FINAL_STATES:
            raise ValueError("only submitted and abandoned calls can be reopened")
        if not refs:
            return 0
        return int(self._run(self._reopen, [self.key(ref) for ref in refs], [time.time()]))

    def batches_with_state(self, state: str) -> list[str]:
        """Batches having a call in ``state`` (a SCAN of every record: for operators)."""
        found: set[str] = set()
        keys_ = self._call(lambda: list(self.client.scan_iter(keys.all_calls(self.source), 1000)))
        for start in range(0, len(keys_), 1000):
            chunk = keys_[start : start + 1000]
            pipe = self.client.pipeline(transaction=False)
            for key in chunk:
                pipe.hmget(key, ["state", "ids"])
            for key, (seen, ids) in zip(chunk, self._call(pipe.execute), strict=True):
                if seen == state:
                    parsed = _ids(ids)
                    found.add(parsed[0] if parsed else keys.batch_of(key))
        return sorted(found)

    def record(self, ref: CallRef) -> CallRecord | None:
        """The stored record of a call, or None when the ledger never saw it."""
        raw = cast(dict[str, str], self._call(self.client.hgetall, self.key(ref)))
        return _record(raw, ref) if raw else None

    def records_of(self, batch_id: str) -> list[CallRecord]:
        """Every call record of one batch (a SCAN: for operators, not hot paths)."""
        found = sorted(
            self._call(lambda: list(self.client.scan_iter(keys.calls_of(self.source, batch_id))))
        )
        pipe = self.client.pipeline(transaction=False)
        for key in found:
            pipe.hgetall(key)
        raws = cast(list[dict[str, str]], self._call(pipe.execute)) if found else []
        records = [
            _record(raw, _ref_from_key(keys.calls_of(self.source, batch_id), batch_id, key))
            for key, raw in zip(found, raws, strict=True)
            if raw
        ]
        return [r for r in records if r.batch_id == batch_id]

    def batch_views(self, batches: Sequence[tuple[str, Sequence[CallRef]]]) -> list[BatchView]:
        """Each batch's claim, dispatch and calls' statuses, in one round trip for all."""
        pipe = self.client.pipeline(transaction=False)
        for batch_id, refs in batches:
            pipe.get(self._claim_key(batch_id))
            pipe.hgetall(self._dispatch_key(batch_id))
            for ref in refs:
                pipe.hmget(self.key(ref), ["state", "result"])
        replies = iter(self._call(pipe.execute))
        return [_view(replies, len(refs)) for _, refs in batches]

    def claim_owners(self, batch_ids: Sequence[str]) -> list[str | None]:
        """The token holding each batch's claim (None when free), in one round trip.

        A poller asks this on every pass for each session it dispatched that is listed
        again, so one MGET per :data:`MGET_KEYS` claims replaces a GET per claim (under a
        backlog, about two Redis commands per call). The claims are of different batches,
        so of different Cluster slots: this is the one read across batches (a Redis
        Cluster would need it split by slot, as redis-py's ``mget_nonatomic`` does).
        """
        keys_ = [self._claim_key(batch_id) for batch_id in batch_ids]
        pipe = self.client.pipeline(transaction=False)
        for at in range(0, len(keys_), MGET_KEYS):
            pipe.mget(keys_[at : at + MGET_KEYS])
        return [owner for chunk in self._call(pipe.execute) for owner in chunk]

    def dispatch(self, batch_id: str) -> Dispatch | None:
        """A batch's latest dispatch record, or None."""
        raw = cast(dict[str, str], self._call(self.client.hgetall, self._dispatch_key(batch_id)))
        return Dispatch.from_hash(raw) if raw else None

    def record_dispatch(self, batch_id: str, dispatch: Dispatch) -> None:
        """Remember a batch's dispatch (its every field, so replacing the previous one)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self._dispatch_key(batch_id), mapping=cast(Any, dispatch.to_hash()))
        pipe.expire(self._dispatch_key(batch_id), self.ttl)
        self._call(pipe.execute)

    def claim_dispatch(self, batch_id: str, dispatch: Dispatch) -> bool:
        """Take a free batch's claim for ``dispatch.token`` and record the dispatch."""
        fields = [str(x) for pair in dispatch.to_hash().items() for x in pair]
        claim_keys = [self._claim_key(batch_id), self._dispatch_key(batch_id)]
        return bool(
            self._run(
                self._claim, claim_keys, [dispatch.token, dispatch.lease_ms, self.ttl, *fields]
            )
        )

    def mark_submitted(
        self, batch_id: str, token: str, refs: Sequence[CallRef], submission_key: str
    ) -> None:
        """Record the API accepted these results under ``submission_key``; free the claim."""
        self._run(
            self._submitted,
            [self._claim_key(batch_id), *(self.key(ref) for ref in refs)],
            [token, submission_key, time.time(), self.ttl],
        )

    def mark_abandoned(self, refs: Sequence[CallRef], reason: str) -> None:
        """Record that the API refused these results for good, and why."""
        fields: dict[str, str | float] = {
            "state": ABANDONED,
            "abandoned_at": time.time(),
            "abandon_reason": scrub(reason),
        }
        self._mark(refs, fields)

    def _mark(self, refs: Sequence[CallRef], fields: dict[str, str | float]) -> None:
        pipe = self.client.pipeline(transaction=True)
        for ref in refs:
            pipe.hset(self.key(ref), mapping=cast(Any, fields))
            pipe.expire(self.key(ref), self.ttl)
        self._call(pipe.execute)

    def claim(self, batch_id: str, token: str, lease_ms: int) -> bool:
        """Take a batch's claim for ``lease_ms`` unless someone holds it."""
        return bool(
            self._call(self.client.set, self._claim_key(batch_id), token, nx=True, px=lease_ms)
        )

    def reclaim(self, batch_id: str, token: str, lease_ms: int) -> bool:
        """Keep or retake a claim: succeeds unless another owner holds it now."""
        return bool(self._run(self._reclaim, [self._claim_key(batch_id)], [token, lease_ms]))

    def takeover(self, batch_id: str, old: str, new: str, lease_ms: int) -> bool:
        """Move a claim from ``old`` to ``new`` owner, only if ``old`` still holds it."""
        return bool(self._run(self._takeover, [self._claim_key(batch_id)], [old, new, lease_ms]))

    def release(self, batch_id: str, token: str) -> bool:
        """Free a claim only if ``token`` still owns it."""
        return bool(self._run(self._release, [self._claim_key(batch_id)], [token]))

    def claim_owner(self, batch_id: str) -> str | None:
        """The token holding a batch's claim, or None."""
        return cast(str | None, self._call(self.client.get, self._claim_key(batch_id)))

    def _run(self, script: LuaScript, keys_: list[str], args: list[Any]) -> Any:
        return self._call(script, keys_, args)

    @staticmethod
    def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            metrics.LEDGER_ERRORS.inc()
            raise LedgerError(f"ledger unavailable: {type(exc).__name__}: {exc}") from exc


def _view(replies: Iterator[Any], calls: int) -> BatchView:
    owner, dispatch = next(replies), next(replies)
    statuses = []
    for _ in range(calls):
        state, result = next(replies)
        statuses.append(
            CallStatus(state, CallResult.model_validate_json(result) if result else None)
        )
    return BatchView(owner, Dispatch.from_hash(dispatch), statuses)


def _record(raw: dict[str, str], ref: CallRef) -> CallRecord:
    """A record from its hash; ids stored in it (verbatim) win over those of ``ref``."""
    result = raw.get("result")
    batch_id, turn_id, call_id = _ids(raw.get("ids")) or ref.ids_tuple
    return CallRecord(
        batch_id=batch_id,
        turn_id=turn_id,
        call_id=call_id,
        state=raw.get("state", "unknown"),
        attempts=int(raw.get("attempts", 0)),
        name=raw.get("name"),
        result=CallResult.model_validate_json(result) if result else None,
        first_started_at=_float(raw.get("first_started_at")),
        started_at=_float(raw.get("started_at")),
        finished_at=_float(raw.get("finished_at")),
        submitted_at=_float(raw.get("submitted_at")),
        submission_key=raw.get("submission_key"),
        abandon_reason=raw.get("abandon_reason"),
        refused_reason=raw.get("refused_reason"),
    )


def _ids(raw: str | None) -> tuple[str, str, str] | None:
    try:
        ids = json.loads(raw) if raw else None
    except ValueError:
        return None
    if isinstance(ids, list) and len(ids) == 3 and all(isinstance(i, str) for i in ids):
        return ids[0], ids[1], ids[2]
    return None


def _ref_from_key(pattern: str, batch_id: str, key: str) -> CallRef:
    """The ids a record's key spells, for records written before ids were stored in them.

    Such records were only written under keys of plain ids, which are spelled as
    themselves; anything else is shown percent-decoded.
    """
    tail = key[len(pattern) - 1 :]
    turn, _, call = tail.partition(":")
    return CallRef(batch_id, unquote(turn), unquote(call))


def _float(value: str | None) -> float | None:
    return float(value) if value else None
