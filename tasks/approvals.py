"""The approval inbox: calls a person must allow, parked durably with a deadline.

A call whose tool says ``requires_approval=True``, or whose policy answers
``RequireApproval``, is asked for once (:meth:`ApprovalStore.ask`): the request keeps the
call's ids, its arguments, their digest, the reason, when it was asked and its deadline.
Nothing runs meanwhile; the call's task waits off the worker's pool (it is retried every
few seconds) and the batch's other calls run. A decision is one script
(:meth:`ApprovalStore.decide`), so two operators at once make one decision; a request
past its deadline takes none. An approved call runs with exactly the arguments approved:
the digest of what it is about to run with must be the approved one.

Everything about one approval is one hash, kept as long as the call records: the request
and the decision are its audit trail.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

import redis

from handlers.context import CallContext
from handlers.result import CallResult, Outcome
from handlers.text import clip, shown
from tasks import keys, metrics

log = logging.getLogger("toolfan.approvals")

#: Characters of a call's arguments kept for the approver to read (the digest covers all).
MAX_SHOWN_ARGUMENTS = 65_536
#: Characters of a decision's reason and of a decider's name kept.
MAX_REASON, MAX_NAME = 2_000, 200


class State(StrEnum):
    """Where an approval stands."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    TIMED_OUT = "timed_out"


class AwaitingApproval(Exception):
    """The call waits for a person's decision; its task looks again ``seconds`` later."""

    def __init__(self, approval: Approval, seconds: float) -> None:
        super().__init__(f"approval {approval.id} pending")
        self.approval = approval
        self.seconds = seconds


def approval_id(source: str, batch_id: str, turn_id: str, call_id: str) -> str:
    """The id of a call's approval: a digest of the call's identity (any ids, short)."""
    identity = json.dumps([source, batch_id, turn_id, call_id], ensure_ascii=True)
    return "apr_" + hashlib.sha256(identity.encode()).hexdigest()[:24]


def digest_of(arguments: Mapping[str, Any]) -> str:
    """The digest of validated arguments, the same for the same values in any key order."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Approval:
    """One call's approval, as stored."""

    id: str
    source: str
    batch_id: str
    turn_id: str
    call_id: str
    function: str
    arguments: str
    digest: str
    reason: str
    asked_at: float
    deadline: float
    timeout: float
    state: State
    agent_id: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    by: str = ""
    decided_at: float | None = None
    decision_reason: str = ""

    @classmethod
    def from_hash(cls, raw: Mapping[str, str]) -> Approval:
        """Read a stored approval."""
        decided = raw.get("decided_at")
        return cls(
            id=raw["id"],
            source=raw["source"],
            batch_id=raw["batch_id"],
            turn_id=raw.get("turn_id", ""),
            call_id=raw["call_id"],
            function=raw["function"],
            arguments=raw.get("arguments", ""),
            digest=raw["digest"],
            reason=raw.get("reason", ""),
            asked_at=float(raw["asked_at"]),
            deadline=float(raw["deadline"]),
            timeout=float(raw.get("timeout", "0")),
            state=State(raw["state"]),
            agent_id=raw.get("agent_id", ""),
            metadata=json.loads(raw.get("metadata") or "{}"),
            by=raw.get("by", ""),
            decided_at=float(decided) if decided else None,
            decision_reason=raw.get("decision_reason", ""),
        )

    def to_json(self) -> dict[str, Any]:
        """The approval as JSON, for the CLI and the HTTP API."""
        data = {k: v for k, v in self.__dict__.items() if k != "state"}
        return {**data, "state": self.state.value, "seconds_left": self.seconds_left()}

    def seconds_left(self, now: float | None = None) -> float:
        """Seconds until its deadline (0 once past, or decided)."""
        if self.state is not State.PENDING:
            return 0.0
        return max(0.0, self.deadline - (time.time() if now is None else now))


@dataclass(frozen=True)
class Decided:
    """What a decision did, and who had decided.

    ``outcome`` is ``decided``, or why not: the state it had already (``approved``,
    ``denied``, ``timed_out``), or ``unknown``.
    """

    outcome: str
    by: str = ""

    @property
    def taken(self) -> bool:
        """Whether this decision is the one that counts."""
        return self.outcome == "decided"


# Create the approval unless it exists; return it either way (the first request wins).
# KEYS: the approval, the pending index. ARGV: id, deadline, TTL, then field/value pairs.
ASK = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 4))
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  return {1, redis.call('HGETALL', KEYS[1])}
end
return {0, redis.call('HGETALL', KEYS[1])}
"""

# Decide a pending approval, unless its deadline has passed (then it times out).
# KEYS: the approval, the pending index. ARGV: decision, by, reason, now.
DECIDE = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'unknown', ''} end
if state ~= 'pending' then return {state, redis.call('HGET', KEYS[1], 'by') or ''} end
local id = redis.call('HGET', KEYS[1], 'id')
if tonumber(ARGV[4]) >= tonumber(redis.call('HGET', KEYS[1], 'deadline')) then
  redis.call('HSET', KEYS[1], 'state', 'timed_out', 'decided_at', ARGV[4], 'by', 'toolfan')
  redis.call('ZREM', KEYS[2], id)
  if ARGV[1] == 'timed_out' then return {'decided', 'toolfan'} end
  return {'timed_out', 'toolfan'}
end
if ARGV[1] == 'timed_out' and ARGV[5] ~= 'withdraw' then return {'pending', ''} end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'by', ARGV[2], 'decision_reason', ARGV[3],
           'decided_at', ARGV[4])
redis.call('ZREM', KEYS[2], id)
return {'decided', ARGV[2]}
"""


class ApprovalStore:
    """The approvals in one Redis (the ledger's), kept ``ttl`` seconds."""

    def __init__(self, client: redis.Redis, ttl: int) -> None:
        self.client = client
        self.ttl = ttl
        self._ask = client.register_script(ASK)
        self._decide = client.register_script(DECIDE)

    def ask(
        self,
        ctx: CallContext,
        arguments: Mapping[str, Any],
        reason: str,
        timeout: float,
        margin: float,
    ) -> tuple[Approval, bool]:
        """The call's approval, asked for now unless it was before; and whether it is new.

        Its deadline is ``timeout`` from now, and never later than the batch's own
        deadline less ``margin`` (a run's expiry: the batch must go out before it).
        """
        now = time.time()
        deadline = now + timeout
        if ctx.deadline is not None:
            deadline = min(deadline, ctx.deadline - margin)
        aid = approval_id(ctx.source, ctx.batch_id, ctx.turn_id, ctx.call_id)
        shown = json.dumps(arguments, ensure_ascii=False, default=str)
        fields: dict[str, str] = {
            "id": aid,
            "source": ctx.source,
            "batch_id": ctx.batch_id,
            "turn_id": ctx.turn_id,
            "call_id": ctx.call_id,
            "function": ctx.function,
            "arguments": clip(shown, MAX_SHOWN_ARGUMENTS),
            "digest": digest_of(arguments),
            "reason": clip(reason, MAX_REASON),
            "asked_at": repr(now),
            "deadline": repr(deadline),
            "timeout": repr(timeout),
            "state": State.PENDING.value,
            "agent_id": ctx.agent_id or "",
            "metadata": json.dumps(dict(ctx.metadata)),
        }
        pairs = [x for kv in fields.items() for x in kv]
        key = keys.approval(aid)
        new, raw = cast(
            "list[Any]",
            self._ask(keys=[key, keys.approvals_pending()], args=[aid, deadline, self.ttl, *pairs]),
        )
        return Approval.from_hash(_pairs(raw)), bool(new)

    def get(self, aid: str) -> Approval | None:
        """The approval called ``aid``, if there is one."""
        raw = cast("dict[Any, Any]", self.client.hgetall(keys.approval(aid)))
        return Approval.from_hash(_text(raw)) if raw else None

    def pending(self) -> list[Approval]:
        """The undecided approvals, the nearest deadline first."""
        ids = cast("list[Any]", self.client.zrange(keys.approvals_pending(), 0, -1))
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for aid in ids:
            pipe.hgetall(keys.approval(_str(aid)))
        found = [Approval.from_hash(_text(raw)) for raw in pipe.execute() if raw]
        return [a for a in found if a.state is State.PENDING]

    def waiting(self) -> tuple[int, float | None]:
        """How many approvals are undecided, and the nearest deadline (two O(1) reads)."""
        index = keys.approvals_pending()
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(index)
        pipe.zrange(index, 0, 0, withscores=True)
        count, first = pipe.execute()
        return int(count), (float(first[0][1]) if first else None)

    def decide(
        self, aid: str, decision: State, by: str, reason: str = "", *, withdraw: bool = False
    ) -> Decided:
        """Approve or deny ``aid`` (or time it out: ``State.TIMED_OUT``), once, atomically.

        A time-out takes effect only past the deadline, unless ``withdraw``: the batch's
        caller stopped waiting (an application's ``timeout``), so nobody should decide.
        """
        now = repr(time.time())
        args = [decision.value, clip(by, MAX_NAME), clip(reason, MAX_REASON), now]
        args.append("withdraw" if withdraw else "")
        outcome, who = cast(
            "list[Any]",
            self._decide(keys=[keys.approval(aid), keys.approvals_pending()], args=args),
        )
        return Decided(_str(outcome), _str(who))


def _pairs(flat: list[Any]) -> dict[str, str]:
    return {_str(flat[i]): _str(flat[i + 1]) for i in range(0, len(flat), 2)}


def _text(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in raw.items()}


def _str(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


#: Seconds between a waiting call's looks at its approval (how soon an approval takes).
POLL_SECONDS = 2.0


def gate(
    store: ApprovalStore,
    ctx: CallContext,
    arguments: Mapping[str, Any],
    reason: str,
    timeout: float,
    margin: float,
) -> CallResult | None:
    """None when the call may run now; its answer when it may not; or it waits.

    Raises:
        AwaitingApproval: nobody decided yet and the deadline is ahead.
    """
    approval, new = store.ask(ctx, arguments, reason, timeout, margin)
    if new:
        metrics.APPROVALS.labels("requested").inc()
        log.info(
            "approval %s asked for %s: %s",
            approval.id,
            ctx.function,
            shown(approval.reason),
            extra={**_ids(approval), "event": "approval_requested", "digest": approval.digest},
        )
    if approval.state is State.PENDING:
        left = approval.seconds_left()
        if left > 0:
            raise AwaitingApproval(approval, min(POLL_SECONDS, left))
        store.decide(approval.id, State.TIMED_OUT, "toolfan")
        approval = store.get(approval.id) or approval
    return _answer(approval, digest_of(arguments))


def close(
    store: ApprovalStore, source: str, ref: tuple[str, str, str], why: str
) -> CallResult | None:
    """Time out a call's undecided approval now; its answer when it has timed out, else None.

    The poller calls this when a batch must go out before its run expires while a call is
    still unfinished: a call waiting for a person is then answered as an approval that
    timed out (and a late decision is refused), not as a call that ran too long. ``ref``
    is the call's batch, turn and call ids. None: no approval, or one decided otherwise.
    """
    aid = approval_id(source, *ref)
    decided = store.decide(aid, State.TIMED_OUT, "toolfan", why, withdraw=True)
    if decided.outcome not in ("decided", State.TIMED_OUT.value):
        return None  # no approval (the common case: one round trip), or a person decided
    approval = store.get(aid)
    if approval is None:
        return None
    if decided.taken:  # logged and counted once, by whoever took the time-out
        return _answer(approval, "")
    return _timed_out(approval)


def _answer(approval: Approval, digest: str) -> CallResult | None:
    """What a decided approval means for the call about to run with ``digest``."""
    extra = {**_ids(approval), "event": "approval_" + approval.state.value, "by": approval.by}
    if approval.state is State.APPROVED and approval.digest == digest:
        metrics.APPROVALS.labels("approved").inc()
        log.info("approval %s approved by %s", approval.id, approval.by, extra=extra)
        return None
    if approval.state is State.APPROVED:
        log.warning("approval %s: the arguments changed after approval", approval.id, extra=extra)
        return CallResult.fail(
            Outcome.DENIED,
            "Not authorized: the arguments differ from the ones that were approved",
        )
    if approval.state is State.DENIED:
        metrics.APPROVALS.labels("denied").inc()
        log.info("approval %s denied by %s", approval.id, approval.by, extra=extra)
        why = approval.decision_reason or "no reason given"
        return CallResult.fail(Outcome.DENIED, f"Denied by {approval.by}: {why}")
    metrics.APPROVALS.labels("timed_out").inc()
    log.warning("approval %s timed out", approval.id, extra=extra)
    return _timed_out(approval)


def _timed_out(approval: Approval) -> CallResult:
    """The answer of a call whose approval timed out."""
    waited = max(0.0, approval.deadline - approval.asked_at)
    return CallResult.fail(Outcome.TIMEOUT, f"Approval timed out after {waited:.0f} s")


def _ids(approval: Approval) -> dict[str, Any]:
    return {
        "approval_id": approval.id,
        "source": approval.source,
        "batch_id": approval.batch_id,
        "turn_id": approval.turn_id,
        "call_id": approval.call_id,
        "function": approval.function,
    }
