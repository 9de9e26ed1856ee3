"""Read-only views of the ledger for operators: one batch in detail, and fleet counts.

These scan keys (SCAN, never KEYS), so they are for humans at a terminal, not hot paths.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from tasks import keys, liveness
from tasks.approvals import ApprovalStore, approval_id
from tasks.ledger import ABANDONED, DONE, STARTED, SUBMITTED, CallRecord, Dispatch, Ledger


def _scan(ledger: Ledger, pattern: str) -> list[str]:
    return sorted(ledger.client.scan_iter(match=pattern, count=1000))


def inspect_session(ledger: Ledger, session_id: str) -> dict[str, Any]:
    """Everything the ledger knows of one batch, JSON-ready (``session_id`` is its id).

    A call that was gated by an approval carries it: the request and the decision.
    """
    store = ApprovalStore(ledger.client, ledger.ttl)
    calls = [_record(record, store, ledger.source) for record in ledger.records_of(session_id)]
    dispatch = ledger.dispatch(session_id)
    return {
        "source": ledger.source,
        "session_id": session_id,
        "claim_owner": ledger.claim_owner(session_id),
        "claim_ttl_ms": max(-1, int(ledger.client.pttl(keys.claim(ledger.source, session_id)))),
        "dispatch": dispatch.__dict__ if dispatch else None,
        "calls": calls,
    }


def _record(record: CallRecord, store: ApprovalStore, source: str) -> dict[str, Any]:
    skipped = ("result", "batch_id")
    data = {k: v for k, v in record.__dict__.items() if v is not None and k not in skipped}
    if record.result is not None:
        data["result"] = record.result.to_json_dict()
    aid = approval_id(source, record.batch_id, record.turn_id, record.call_id)
    approval = store.get(aid)
    if approval is not None:
        data["approval"] = approval.to_json()
    return data


@dataclass
class FleetStatus:
    """Counts across the whole ledger, every source together."""

    calls: Counter[str] = field(default_factory=Counter)
    claims: int = 0
    stale_claims: int = 0
    workers_alive: list[str] = field(default_factory=list)
    workers_dead: Counter[str] = field(default_factory=Counter)
    orphans_redone: int = 0

    def lines(self) -> list[str]:
        """The human summary, one fact per line."""
        started, done = self.calls[STARTED], self.calls[DONE]
        holding = sum(1 for n in self.workers_dead.values() if n)
        return [
            f"calls in flight: {started + done} ({started} running, {done} awaiting submit)",
            f"calls submitted: {self.calls[SUBMITTED]}",
            f"calls abandoned: {self.calls[ABANDONED]}",
            f"claims held: {self.claims} ({self.stale_claims} stale)",
            f"workers alive: {len(self.workers_alive)}"
            + (f" ({', '.join(sorted(self.workers_alive))})" if self.workers_alive else ""),
            f"workers dead in the last hour: {len(self.workers_dead)} ({holding} still "
            f"holding {sum(self.workers_dead.values())} started calls)",
            f"orphaned calls redone: {self.orphans_redone}",
        ]


def fleet_status(ledger: Ledger, queue_budget: float, dead_after: float) -> FleetStatus:
    """Count calls by state and find stale claims.

    A claim is stale once its dispatch has been running longer than its tools' timeouts
    allow (the lease minus the queueing budget): its chord is probably dead, and the
    lease will run out and hand the batch to the next poll.
    """
    status = FleetStatus()
    workers = liveness.fleet(ledger.client, dead_after)
    status.workers_alive = workers.alive
    status.workers_dead = Counter({w: 0 for w in workers.dead})
    status.orphans_redone = int(ledger.client.get(keys.ORPHANS_REDONE) or 0)
    pipe = ledger.client.pipeline(transaction=False)
    call_keys = _scan(ledger, keys.ALL_CALLS)
    for key in call_keys:
        pipe.hmget(key, ["state", "worker"])
    for state, worker in pipe.execute():
        status.calls[state or "unknown"] += 1
        if state == STARTED and worker and liveness.worker_of(worker) in status.workers_dead:
            status.workers_dead[liveness.worker_of(worker)] += 1
    now = time.time()
    for key in _scan(ledger, keys.ALL_CLAIMS):
        status.claims += 1
        raw = cast(dict[str, str], ledger.client.hgetall(keys.dispatch_of_claim(key)))
        dispatch = Dispatch.from_hash(raw) if raw else None
        if dispatch is not None and now > dispatch.dispatched_at + max(
            0.0, dispatch.lease_ms / 1000 - queue_budget
        ):
            status.stale_claims += 1
    return status
