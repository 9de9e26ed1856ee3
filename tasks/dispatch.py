"""Dispatching batches: claims, leases, chords, and the rules that redo or expire them.

A source's poller (or a pushed event) finds batches of pending calls; this module decides,
for every source alike, what to do with each: nothing (its calls were submitted, or a live
dispatch holds it), a new dispatch (one chord: one ``execute`` per unfinished call on its
function's queue, then one ``submit`` of the batch), or a takeover of a dispatch that will
not finish (its calls are about to expire, or a dead worker took part of it). Any number
of pollers may run at once: a batch is dispatched only by whoever wins its claim, and
calls the ledger knows as submitted are never sent again, however long the source keeps
listing them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from handlers.result import CallResult, Outcome
from handlers.text import shown
from tasks import metrics
from tasks.app import app
from tasks.approvals import ApprovalStore, close
from tasks.envelope import Delivery, Envelope, bounded_metadata
from tasks.execute import call_signature, result_payload, tool_timeout
from tasks.ledger import FINAL_STATES, BatchView, CallRef, CallStatus, Dispatch, Ledger
from tasks.liveness import Reaper
from tasks.memo import DispatchMemo
from tasks.publish import send_chord
from tasks.queues import ControlQueue, execute_queue
from tasks.runtime import delivers_in_place
from tasks.settings import Settings, load_registry
from tasks.submit import UNSTORED, submit, submit_reprs

log = logging.getLogger("toolfan.dispatch")


@dataclass(frozen=True)
class PendingCall:
    """One pending call of a batch, as a source found it.

    ``problem`` is why its arguments were refused unread (over a size or nesting limit);
    such a call travels without them and is answered with the reason.
    """

    turn_id: str
    call_id: str
    name: str
    arguments: Any
    problem: str | None = None


@dataclass(frozen=True)
class Batch:
    """A batch of pending calls, answered in one delivery.

    Attributes:
        batch_id: Its id in its source.
        calls: Its pending calls, each once.
        expires_at: When the source stops accepting its answers (epoch seconds), if the
            source says; else ``TOOLFAN_ACTION_EXPIRY`` after its first dispatch, if set.
        agent_id: The agent it belongs to, where the source knows it.
        metadata: Its metadata, where the source has them, bounded as the APIs bound it.
        declared: The functions its agent (or run) declares, where it lists its tools: a
            call to a registered function outside them is refused, never sent, while
            ``TOOLFAN_ENFORCE_AGENT_TOOLS`` is on (one agent cannot reach another's tools).
    """

    batch_id: str
    calls: Sequence[PendingCall]
    expires_at: float | None = None
    agent_id: str | None = None
    metadata: Mapping[str, str] | None = None
    declared: frozenset[str] | None = None

    def __post_init__(self) -> None:
        """Bound the metadata once per batch: each of its calls' messages carries a copy."""
        object.__setattr__(self, "metadata", bounded_metadata(self.metadata))


@dataclass
class DispatchCounts:
    """What dispatching some batches did."""

    dispatched: int = 0
    calls_dispatched: int = 0
    calls_resubmitted: int = 0
    calls_expired: int = 0
    stale_claims: int = 0
    skipped_in_flight: int = 0
    skipped_submitted: int = 0


def count_into(summary: Any, counts: DispatchCounts, dispatched: str) -> None:
    """Add ``counts`` to a pass's summary, whose batches-dispatched field is ``dispatched``.

    Every source's summary names the dispatcher's counters alike, but its batches its own
    way (``sessions_dispatched``, ``runs_dispatched``).
    """
    setattr(summary, dispatched, getattr(summary, dispatched) + counts.dispatched)
    for name in _SHARED:
        setattr(summary, name, getattr(summary, name) + getattr(counts, name))


_SHARED = (
    "calls_dispatched",
    "calls_resubmitted",
    "calls_expired",
    "stale_claims",
    "skipped_in_flight",
    "skipped_submitted",
)


@dataclass
class _Liveness:
    """What the dispatcher knows of dead workers in this pass."""

    last_death: float | None = None
    queued: dict[str, int | None] = field(default_factory=dict)


class Dispatcher:
    """Claims and dispatches one source's batches.

    Args:
        source: The source's name: it picks the ledger's keys and the submit's delivery.
        ledger: The ledger of that source.
        settings: Budgets and limits.
        memo: The dispatches this process made, kept across passes.
        reaper: Finds dead workers' orphans; without one, lost dispatches wait for leases.
        noun: What the source calls a batch, in log lines and messages (``session``).
    """

    def __init__(
        self,
        source: str,
        ledger: Ledger,
        settings: Settings,
        memo: DispatchMemo | None = None,
        reaper: Reaper | None = None,
        noun: str = "batch",
    ) -> None:
        self.source = source
        self.ledger = ledger
        self.settings = settings
        self.memo = memo if memo is not None else DispatchMemo()
        self.reaper = reaper
        self.noun = noun
        self._live = _Liveness()

    # -- a pass ---------------------------------------------------------------------------

    def begin_pass(self) -> None:
        """Read when a worker last died; a new death makes every dispatch worth a look.

        The dispatch memo skips batches this process dispatched itself; one of them may
        have had a call in the hands of the worker that just died.
        """
        self._live.queued.clear()
        if self.reaper is None:
            return
        try:
            death = self.reaper.last_death()
        except Exception as exc:  # no verdict this pass; the next one asks again
            log.warning("could not read the workers' heartbeats: %s", exc)
            return
        if death is not None and death != self._live.last_death:
            self.memo.clear()
        self._live.last_death = death

    def end_pass(self) -> int:
        """Put back the messages of dead workers (heartbeat threads do it too); how many."""
        self.memo.prune()
        if self.reaper is None:
            return 0
        try:
            return self.reaper.reap()
        except Exception as exc:  # a broker blip must not fail a pass that did its work
            log.warning("could not look for orphaned calls: %s: %s", type(exc).__name__, exc)
            return 0

    def dispatch(self, batches: Sequence[Batch], counts: DispatchCounts) -> None:
        """Handle some batches with one ledger round trip for all of them."""
        waiting = self._skip_own_in_flight([b for b in batches if b.calls], counts)
        views = self.ledger.batch_views(
            [(b.batch_id, [_ref(b.batch_id, c) for c in b.calls]) for b in waiting]
        )
        for batch, view in zip(waiting, views, strict=True):
            self._batch(batch, view, counts)

    # -- one batch ------------------------------------------------------------------------

    def _ids(self, batch_id: str) -> str:
        return f"{self.noun}_id={shown(batch_id)}"

    def _skip_own_in_flight(self, waiting: list[Batch], counts: DispatchCounts) -> list[Batch]:
        """Drop the batches this process dispatched whose claim is still its own."""
        ours = self.own_in_flight(
            [(b.batch_id, [(c.turn_id, c.call_id) for c in b.calls]) for b in waiting], counts
        )
        return [b for b in waiting if b.batch_id not in ours]

    def remembers(self, batch_id: object) -> bool:
        """Whether this process dispatched the batch and may find it still in flight."""
        return isinstance(batch_id, str) and self.memo.knows(batch_id)

    def own_in_flight(
        self, batches: Sequence[tuple[str, Sequence[tuple[str, str]]]], counts: DispatchCounts
    ) -> set[str]:
        """The batches (id, call ids) still in flight under this process's own claim.

        One GET per remembered batch replaces reading its dispatch and every call's state;
        each one found is counted as skipped.
        """
        known = set(self.memo.candidates(bid for bid, _ in batches))
        if not known:
            return set()
        owners = dict(zip(known, self.ledger.claim_owners(list(known)), strict=True))
        ours = set()
        for bid, calls in batches:
            if bid in known and self.memo.in_flight(bid, owners[bid], calls):
                counts.skipped_in_flight += len(calls)
                ours.add(bid)
        return ours

    def _batch(self, batch: Batch, view: BatchView, counts: DispatchCounts) -> None:
        pending = [
            (c, s)
            for c, s in zip(batch.calls, view.calls, strict=True)
            if s.state not in FINAL_STATES
        ]
        counts.skipped_submitted += len(batch.calls) - len(pending)
        if not pending:
            return
        if view.claim_owner is not None:
            self._in_flight(batch, view, pending, counts)
            return
        lease = self._lease_ms(pending)
        dispatch = self._new_dispatch(uuid.uuid4().hex, lease, view.dispatch, batch)
        if not self.ledger.claim_dispatch(batch.batch_id, dispatch):
            counts.skipped_in_flight += len(pending)
            return
        try:
            pending = [(c, self._refuse_undeclared(batch, c, st)) for c, st in pending]
            self._dispatch(batch, dispatch, pending, counts)
        except BaseException:  # an interrupted pass too: free the claim it just took
            self.ledger.release(batch.batch_id, dispatch.token)
            raise

    def _in_flight(
        self,
        batch: Batch,
        view: BatchView,
        pending: list[tuple[PendingCall, CallStatus]],
        counts: DispatchCounts,
    ) -> None:
        """Leave a claimed batch alone, unless something will not let it finish.

        That is: its calls are about to expire, or a dead worker took one of them.
        """
        dispatch = view.dispatch
        if dispatch is not None and self._stale(dispatch):
            counts.stale_claims += 1
        if dispatch is None or dispatch.token != view.claim_owner:
            counts.skipped_in_flight += len(pending)
            return
        if self._expiring(dispatch):
            if self._take_over(batch, dispatch, pending, counts, expire=True):
                counts.calls_expired += sum(1 for _, s in pending if s.result is None)
                log.warning(
                    "%s actions expire soon; answering unfinished calls with timeout errors",
                    self._ids(batch.batch_id),
                )
            return
        if not self._lost(dispatch, pending):
            counts.skipped_in_flight += len(pending)
        elif self._take_over(batch, dispatch, pending, counts, expire=False):
            log.warning(
                "%s a worker died with calls of this %s that never began and wait on no "
                "queue; dispatching them again",
                self._ids(batch.batch_id),
                self.noun,
            )

    def _take_over(
        self,
        batch: Batch,
        dispatch: Dispatch,
        pending: list[tuple[PendingCall, CallStatus]],
        counts: DispatchCounts,
        *,
        expire: bool,
    ) -> bool:
        """Move the claim to a new dispatch of ``pending``; False if another owner has it.

        With ``expire``, unfinished calls are answered with timeout errors first.
        """
        token = uuid.uuid4().hex
        if not self.ledger.takeover(batch.batch_id, dispatch.token, token, self._lease_ms(pending)):
            counts.skipped_in_flight += len(pending)
            return False
        if expire:
            pending = [(c, self._expire(batch.batch_id, c, s)) for c, s in pending]
        takeover = self._new_dispatch(token, self._lease_ms(pending), dispatch, batch)
        self.ledger.record_dispatch(batch.batch_id, takeover)
        self._dispatch(batch, takeover, pending, counts)
        return True

    def _lost(self, dispatch: Dispatch, pending: list[tuple[PendingCall, CallStatus]]) -> bool:
        """Whether a worker that died after this dispatch took part of it that no one has.

        The reaper gives back every message a dead worker had taken; a message popped from
        its queue but not yet recorded as taken (the broker's reply still in the dead
        worker's socket) exists nowhere any more. So once the death is older than
        ``TOOLFAN_DEAD_AFTER`` plus two beats (the reaper has had its turn), a dispatch from
        before it is lost when a call of it never began and its queue is empty, or when
        every call is done and the submit queue is empty (the chord's submit went down).
        Redoing it costs at most a copy that finds the result saved (or the call running
        elsewhere), or a submit of the same batch under the same key.
        """
        death = self._live.last_death  # its last beat: it may have lived one beat longer
        if death is None or death + self.settings.heartbeat <= dispatch.dispatched_at:
            return False
        settle = self.settings.dead_after + 2 * self.settings.heartbeat
        if time.time() < death + settle:
            return False
        waiting = [c for c, s in pending if s.state is None]
        if waiting:
            return all(self._queue_empty(execute_queue(load_registry(), c.name)) for c in waiting)
        finished = all(s.result is not None for _, s in pending)
        return finished and self._queue_empty(ControlQueue.SUBMIT.value)

    def _queue_empty(self, queue: str) -> bool:
        queued = self._live.queued
        if queue not in queued:
            queued[queue] = self.reaper.queued(queue) if self.reaper else None
        return queued[queue] == 0

    def _stale(self, dispatch: Dispatch) -> bool:
        """Whether a dispatch has outrun its tools' timeouts (its chord is probably dead)."""
        return time.time() > self._stale_at(dispatch)

    def _stale_at(self, dispatch: Dispatch) -> float:
        budget = max(0.0, dispatch.lease_ms / 1000 - self.settings.queue_budget)
        return dispatch.dispatched_at + budget

    def _recheck_at(self, dispatch: Dispatch) -> float:
        """When a dispatch next needs a full read: once stale, or near its calls' expiry."""
        if dispatch.expires_at is None:
            return self._stale_at(dispatch)
        return min(self._stale_at(dispatch), dispatch.expires_at - self.settings.expiry_margin)

    def _expiring(self, dispatch: Dispatch) -> bool:
        if dispatch.expires_at is None:
            return False
        return time.time() >= dispatch.expires_at - self.settings.expiry_margin

    def _expire(self, batch_id: str, call: PendingCall, status: CallStatus) -> CallStatus:
        """Save a timeout error for an unfinished call; a result saved first still wins.

        A call still waiting for a person gets its approval's timeout (the approval is
        closed now, so a late decision is refused): its deadline is this same instant, and
        the waiting task's next look may come after the batch must go out.
        """
        if status.result is not None:
            return status
        store = ApprovalStore(self.ledger.client, self.ledger.ttl)
        why = f"the {self.noun}'s pending actions expire"
        error = close(store, self.source, (batch_id, call.turn_id, call.call_id), why)
        if error is None:
            error = CallResult.fail(
                Outcome.TIMEOUT,
                f"Function {call.name!r} did not finish before the {self.noun}'s pending "
                "actions expire; it was answered with this error so the turn can continue",
            )
        return CallStatus(status.state, self.ledger.finish(_ref(batch_id, call), error))

    def _refuse_undeclared(self, batch: Batch, call: PendingCall, status: CallStatus) -> CallStatus:
        """Save a refusal for a call to a registered function the batch's agent lacks.

        An unregistered name is left to ``execute`` (it answers "unknown function").
        """
        declared = batch.declared
        if (
            status.result is not None
            or declared is None
            or call.name in declared
            or not self.settings.enforce_agent_tools
            or call.name not in load_registry()
        ):
            return status
        whose = f"agent {shown(batch.agent_id)}" if batch.agent_id else f"this {self.noun}'s agent"
        log.warning(
            "%s call_id=%s refused: %s does not declare function %s",
            self._ids(batch.batch_id),
            shown(call.call_id),
            whose,
            shown(call.name),
        )
        refusal = CallResult.fail(
            Outcome.DENIED,
            f"Not authorized: {whose} does not declare function {call.name!r}",
        )
        metrics.CALLS.labels(call.name, Outcome.DENIED.value).inc()
        return CallStatus(status.state, self.ledger.finish(_ref(batch.batch_id, call), refusal))

    def _lease_ms(self, pending: list[tuple[PendingCall, CallStatus]]) -> int:
        """Longest tool timeout plus its grace plus the queueing budget."""
        registry = load_registry()
        timeouts = [tool_timeout(registry, c.name) for c, _ in pending]
        budget = max(timeouts) + self.settings.time_limit_grace + self.settings.queue_budget
        return int(budget * 1000)

    def _dispatch(
        self,
        batch: Batch,
        dispatch: Dispatch,
        pending: list[tuple[PendingCall, CallStatus]],
        counts: DispatchCounts,
    ) -> None:
        bid = batch.batch_id
        calls = [[c.turn_id, c.call_id] for c, _ in pending]
        saved = [result_payload(_ref(bid, c), c.name, s.result) for c, s in pending if s.result]
        to_run = [c for c, s in pending if s.result is None]
        delivery = Delivery(
            source=self.source,
            batch_id=bid,
            token=dispatch.token,
            calls=tuple((turn, call) for turn, call in calls),
            lease_ms=dispatch.lease_ms,
            first_seen=dispatch.first_seen,
        )
        with _not_subscribing(app.backend):
            if len(to_run) == 1 and not saved and delivers_in_place(self.source):
                envelope = self._envelope(batch, to_run[0], dispatch)
                call_signature(envelope, delivery.to_wire()).set(**UNSTORED).apply_async()
            else:
                self._send_chord(batch, dispatch, delivery, to_run, saved)
        sent = [(turn_id, call_id) for turn_id, call_id in calls]
        self.memo.remember(bid, dispatch.token, sent, self._recheck_at(dispatch))
        counts.dispatched += 1
        counts.calls_dispatched += len(to_run)
        counts.calls_resubmitted += len(saved)
        log.info(
            "%s dispatched %d call(s), %d saved result(s)",
            self._ids(bid),
            len(to_run),
            len(saved),
        )

    def _send_chord(
        self,
        batch: Batch,
        dispatch: Dispatch,
        delivery: Delivery,
        to_run: list[PendingCall],
        saved: list[dict[str, Any]],
    ) -> None:
        """One ``execute`` per call to run, then one ``submit`` with the saved results too."""
        reprs = submit_reprs(batch.batch_id, len(delivery.calls), self.source)
        body = submit.s(batch=delivery.to_wire(), saved=saved).set(**UNSTORED, **reprs)
        if not to_run:
            body.apply_async(args=([],))
            return
        header = [
            call_signature(self._envelope(batch, c, dispatch)).set(**UNSTORED) for c in to_run
        ]
        send_chord(app, header, body)

    def _envelope(self, batch: Batch, call: PendingCall, dispatch: Dispatch) -> Envelope:
        return Envelope(
            source=self.source,
            batch_id=batch.batch_id,
            turn_id=call.turn_id,
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            problem=call.problem,
            agent_id=batch.agent_id,
            metadata=batch.metadata,
            deadline=dispatch.expires_at,
        )

    def _new_dispatch(
        self, token: str, lease_ms: int, previous: Dispatch | None, batch: Batch
    ) -> Dispatch:
        """A dispatch record; the expiry of the calls is fixed at their first dispatch.

        A source that knows the batch's own deadline (a run's ``expires_at``) sets it;
        otherwise ``TOOLFAN_ACTION_EXPIRY`` counts from the first dispatch, if set.
        """
        now = time.time()
        expires_at = previous.expires_at if previous is not None else None
        if batch.expires_at is not None:
            expires_at = batch.expires_at
        elif expires_at is None and self.settings.action_expiry is not None:
            expires_at = now + self.settings.action_expiry
        first_seen = previous.first_seen if previous is not None else None
        return Dispatch(token, now, lease_ms, expires_at, first_seen or now)


def _ref(batch_id: str, call: PendingCall) -> CallRef:
    return CallRef(batch_id, call.turn_id, call.call_id)


@contextmanager
def _not_subscribing(backend: Any) -> Iterator[None]:
    """While sending, keep this thread's result backend from subscribing to the results.

    Celery's Redis backend subscribes to a sent task's result channel, and a chord's group
    result to each member's, so that the sender could wait for them. A dispatch never
    does (the ledger holds every result and the chord hands them to ``submit``), so each
    subscription was a SUBSCRIBE and, to leave no channel behind, an UNSUBSCRIBE after it:
    two commands per call for nothing. Only the send is spared: anything else in this
    process that waits on a result (``AsyncResult.get``) still subscribes as usual.
    """
    backend.add_pending_result = _not_pending
    backend.on_task_call = _no_subscription
    try:
        yield
    finally:
        del backend.add_pending_result, backend.on_task_call


def _not_pending(result: Any, weak: bool = False, start_drainer: bool = True) -> Any:
    return result


def _no_subscription(producer: Any, task_id: str) -> None:
    return None
