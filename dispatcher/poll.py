"""``poll_once``: find waiting sessions and dispatch one chord per session.

Every trigger (cron's ``toolfan poll --once``, the ``--interval`` loop, Celery beat, a
webhook) calls this one function, and any number may run at once: a session is dispatched
only by whoever wins its claim, and calls the ledger knows as submitted are never sent
again, however long the API keeps listing them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from celery import chord
from celery.result import AsyncResult, GroupResult

from dispatcher.client import AgentsClient
from dispatcher.listing import ListBudget
from dispatcher.memo import DispatchMemo
from dispatcher.models import BadSession, FunctionCall, Session
from dispatcher.once import OnceLog
from dispatcher.sources.agents import SOURCE, get_client
from handlers import jsonsafe
from handlers.result import CallResult, Outcome
from handlers.text import shown
from tasks import metrics
from tasks.app import app
from tasks.envelope import Envelope
from tasks.execute import call_signature, get_ledger, result_payload, tool_timeout
from tasks.ledger import FINAL_STATES, BatchView, CallRef, CallStatus, Dispatch, Ledger
from tasks.liveness import Reaper
from tasks.queues import ControlQueue, execute_queue
from tasks.settings import Settings, get_settings, load_registry
from tasks.submit import submit, submit_reprs

log = logging.getLogger("toolfan.poll")

#: Sessions handled per ledger round trip: one API page.
PAGE = 100
#: Options of every task the poller sends. The ledger keeps each call's result, and the
#: chord hands the header's results to ``submit`` whether or not the backend stores them,
#: so storing them again (a SETEX and a PUBLISH per task) would be work nobody reads.
UNSTORED: dict[str, Any] = {"ignore_result": True}


@dataclass(frozen=True)
class Call:
    """One pending call as the poller dispatches it.

    ``problem`` is why its arguments were refused unread (over a size or nesting limit);
    such a call travels without them and is answered with the reason.
    """

    turn_id: str
    call_id: str
    name: str
    arguments: Any
    problem: str | None = None

    @classmethod
    def of(cls, call: FunctionCall, problem: str | None) -> Call:
        """The call of a listed ``function_call``."""
        arguments = None if problem is not None else call.arguments
        return cls(call.turn_id, call.call_id, call.name, arguments, problem)


@dataclass
class PollSummary:
    """What one pass saw and did; printed as one line by the CLI."""

    sessions_seen: int = 0
    sessions_pending: int = 0
    sessions_dispatched: int = 0
    calls_dispatched: int = 0
    calls_resubmitted: int = 0
    calls_expired: int = 0
    skipped_in_flight: int = 0
    stale_claims: int = 0
    skipped_submitted: int = 0
    skipped_other: int = 0
    errors: int = 0
    passes_cut: int = 0
    orphans_restored: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict (the poll task's JSON result)."""
        return asdict(self)

    def line(self) -> str:
        """The one-line summary."""
        return (
            f"poll: {self.sessions_seen} sessions seen, {self.sessions_pending} with calls "
            f"pending; {self.calls_dispatched} calls dispatched in {self.sessions_dispatched} "
            f"sessions, {self.calls_resubmitted} saved results resubmitted, "
            f"{self.calls_expired} answered as expiring; skipped "
            f"{self.skipped_in_flight} in flight ({self.stale_claims} stale claims), "
            f"{self.skipped_submitted} submitted, "
            f"{self.skipped_other} other types; {self.errors} errors"
            + (" (pass cut short)" if self.passes_cut else "")
            + (f"; {self.orphans_restored} orphaned calls redone" if self.orphans_restored else "")
        )


class Poller:
    """One pass over the sessions, with its collaborators injected for tests."""

    def __init__(
        self,
        client: AgentsClient,
        ledger: Ledger,
        settings: Settings,
        memo: DispatchMemo | None = None,
        stop: threading.Event | None = None,
        reaper: Reaper | None = None,
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.settings = settings
        self.memo = memo if memo is not None else DispatchMemo()
        self.stop = stop
        self.reaper = reaper
        self.reported = OnceLog(log)
        self._resume: str | None = None
        self._last_death: float | None = None
        self._queued: dict[str, int | None] = {}

    def poll_once(self) -> PollSummary:
        """List every matching session and dispatch the ones with undispatched calls."""
        summary = PollSummary()
        started = time.perf_counter()
        self._note_deaths()
        listing = self.client.list_sessions(
            agent_id=self.settings.agent_id,
            metadata=self.settings.session_metadata or None,
            after=self._resume,
            budget=ListBudget(
                self.settings.poll_max_pages,
                self.settings.poll_max_seconds,
                self.stop.is_set if self.stop is not None else None,
            ),
        )
        for page in _pages(listing, PAGE):
            summary.sessions_seen += len(page)
            self.dispatch_sessions(page, summary)
        self._end_listing(listing.cut, listing.last_id, summary)
        self._reap(summary)
        self.memo.prune()
        metrics.POLL_DURATION.observe(time.perf_counter() - started)
        metrics.SESSIONS_PENDING.set(summary.sessions_pending)
        metrics.STALE_CLAIMS.set(summary.stale_claims)
        log.info("%s", summary.line(), extra=summary.as_dict())
        return summary

    def _note_deaths(self) -> None:
        """Read when a worker last died; a new death makes every dispatch worth a look.

        The dispatch memo skips sessions this poller dispatched itself; one of them may
        have had a call in the hands of the worker that just died.
        """
        self._queued.clear()
        if self.reaper is None:
            return
        try:
            death = self.reaper.last_death()
        except Exception as exc:  # no verdict this pass; the next one asks again
            log.warning("poll: could not read the workers' heartbeats: %s", exc)
            return
        if death is not None and death != self._last_death:
            self.memo.clear()
        self._last_death = death

    def _reap(self, summary: PollSummary) -> None:
        """Put back the messages of dead workers (the heartbeats' reapers do it too)."""
        if self.reaper is None:
            return
        try:
            summary.orphans_restored = self.reaper.reap()
        except Exception as exc:  # a broker blip must not fail a pass that did its work
            log.warning("poll: could not look for orphaned calls: %s: %s", type(exc).__name__, exc)

    def _end_listing(self, cut: str | None, last_id: str | None, summary: PollSummary) -> None:
        """Note a pass cut short; after a budget ran out, the next pass goes on from there."""
        budget_ran_out = cut is not None and "budget" in cut
        self._resume = last_id if budget_ran_out else None
        if cut is None or cut == "stopping":
            return
        summary.passes_cut += 1
        metrics.POLL_ERRORS.labels("pass_cut").inc()
        log.warning(
            "poll: ending the pass early: %s%s",
            cut,
            "; the next pass continues from there" if budget_ran_out else "",
        )

    def dispatch_sessions(
        self, page: list[Session | BadSession], summary: PollSummary | None = None
    ) -> PollSummary:
        """Handle up to a page of sessions with one ledger round trip for all of them.

        The poll pass feeds it the list's pages; a targeted dispatch (``toolfan resubmit``,
        a pushed event) feeds it one retrieved session, through the same claims and chords.
        """
        summary = summary if summary is not None else PollSummary()
        waiting = []
        for session in page:
            if isinstance(session, BadSession):
                self._bad_session(session, summary)
                continue
            summary.skipped_other += sum(1 for a in session.other_actions if a.problem is None)
            calls = self._unique_calls(session, summary)
            if calls:
                summary.sessions_pending += 1
                waiting.append((session.id, calls))
        waiting = self._skip_own_in_flight(waiting, summary)
        views = self.ledger.batch_views(
            [(sid, [_ref(sid, c) for c in calls]) for sid, calls in waiting]
        )
        for (session_id, calls), view in zip(waiting, views, strict=True):
            self._session(session_id, calls, view, summary)
        return summary

    def _bad_session(self, bad: BadSession, summary: PollSummary) -> None:
        summary.errors += 1
        metrics.POLL_ERRORS.labels("session").inc()
        self.reported.error(
            bad.id, "session_id=%s skipped: %s", shown(bad.id or "<none>"), bad.problem
        )

    def _unique_calls(self, session: Session, summary: PollSummary) -> list[Call]:
        """The session's function calls, once each; malformed and repeated entries are errors.

        Each call's arguments are checked against the size and nesting limits here, before
        they reach a message: a call over a limit is still dispatched, with the reason in
        place of its arguments, so it is answered with that reason.
        """
        sid = shown(session.id)
        for bad in (a for a in session.other_actions if a.problem is not None):
            summary.errors += 1
            metrics.POLL_ERRORS.labels("action").inc()
            self.reported.error(
                session.id, "session_id=%s unreadable required action: %s", sid, bad.problem
            )
        seen: dict[tuple[str, str], Call] = {}
        for call in session.function_calls:
            if (call.turn_id, call.call_id) in seen:
                summary.errors += 1
                self.reported.error(
                    session.id,
                    "session_id=%s turn_id=%s call_id=%s listed twice",
                    sid,
                    shown(call.turn_id),
                    shown(call.call_id),
                )
                continue
            seen[(call.turn_id, call.call_id)] = Call.of(call, self._problem(call))
        return list(seen.values())

    def _problem(self, call: FunctionCall) -> str | None:
        return jsonsafe.check(
            call.arguments,
            max_depth=self.settings.max_depth,
            max_bytes=self.settings.max_argument_bytes,
        )

    def _skip_own_in_flight(
        self, waiting: list[tuple[str, list[Call]]], summary: PollSummary
    ) -> list[tuple[str, list[Call]]]:
        """Drop the sessions this process dispatched whose claim is still its own.

        One GET per such session replaces reading its dispatch and every call's state.
        """
        known = set(self.memo.candidates(sid for sid, _ in waiting))
        if not known:
            return waiting
        owners = dict(zip(known, self.ledger.claim_owners(list(known)), strict=True))
        rest = []
        for session_id, calls in waiting:
            ids = [(c.turn_id, c.call_id) for c in calls]
            if session_id in known and self.memo.in_flight(session_id, owners[session_id], ids):
                summary.skipped_in_flight += len(calls)
            else:
                rest.append((session_id, calls))
        return rest

    def _session(
        self, session_id: str, calls: list[Call], view: BatchView, summary: PollSummary
    ) -> None:
        pending = [
            (c, s) for c, s in zip(calls, view.calls, strict=True) if s.state not in FINAL_STATES
        ]
        summary.skipped_submitted += len(calls) - len(pending)
        if not pending:
            return
        if view.claim_owner is not None:
            self._in_flight(session_id, view, pending, summary)
            return
        dispatch = self._new_dispatch(uuid.uuid4().hex, self._lease_ms(pending), view.dispatch)
        if not self.ledger.claim_dispatch(session_id, dispatch):
            summary.skipped_in_flight += len(pending)
            return
        try:
            self._dispatch(session_id, dispatch, pending, summary)
        except BaseException:  # an interrupted pass too: free the claim it just took
            self.ledger.release(session_id, dispatch.token)
            raise

    def _in_flight(
        self,
        session_id: str,
        view: BatchView,
        pending: list[tuple[Call, CallStatus]],
        summary: PollSummary,
    ) -> None:
        """Leave a claimed session alone, unless something will not let it finish.

        That is: its actions are about to expire, or a dead worker took one of its calls.
        """
        dispatch = view.dispatch
        if dispatch is not None and self._stale(dispatch):
            summary.stale_claims += 1
        if dispatch is None or dispatch.token != view.claim_owner:
            summary.skipped_in_flight += len(pending)
            return
        if self._expiring(dispatch):
            if self._take_over(session_id, dispatch, pending, summary, expire=True):
                summary.calls_expired += sum(1 for _, s in pending if s.result is None)
                log.warning(
                    "session_id=%s actions expire soon; answering unfinished calls with "
                    "timeout errors",
                    shown(session_id),
                )
            return
        if not self._lost(dispatch, pending):
            summary.skipped_in_flight += len(pending)
        elif self._take_over(session_id, dispatch, pending, summary, expire=False):
            log.warning(
                "session_id=%s a worker died with calls of this session that never began "
                "and wait on no queue; dispatching them again",
                shown(session_id),
            )

    def _take_over(
        self,
        session_id: str,
        dispatch: Dispatch,
        pending: list[tuple[Call, CallStatus]],
        summary: PollSummary,
        *,
        expire: bool,
    ) -> bool:
        """Move the claim to a new dispatch of ``pending``; False if another owner has it.

        With ``expire``, unfinished calls are answered with timeout errors first.
        """
        token = uuid.uuid4().hex
        if not self.ledger.takeover(session_id, dispatch.token, token, self._lease_ms(pending)):
            summary.skipped_in_flight += len(pending)
            return False
        if expire:
            pending = [(c, self._expire(session_id, c, s)) for c, s in pending]
        takeover = self._new_dispatch(token, self._lease_ms(pending), dispatch)
        self.ledger.record_dispatch(session_id, takeover)
        self._dispatch(session_id, takeover, pending, summary)
        return True

    def _lost(self, dispatch: Dispatch, pending: list[tuple[Call, CallStatus]]) -> bool:
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
        death = self._last_death  # its last beat: it may have lived one beat longer
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
        if queue not in self._queued:
            self._queued[queue] = self.reaper.queued(queue) if self.reaper else None
        return self._queued[queue] == 0

    def _stale(self, dispatch: Dispatch) -> bool:
        """Whether a dispatch has outrun its tools' timeouts (its chord is probably dead)."""
        return time.time() > self._stale_at(dispatch)

    def _stale_at(self, dispatch: Dispatch) -> float:
        budget = max(0.0, dispatch.lease_ms / 1000 - self.settings.queue_budget)
        return dispatch.dispatched_at + budget

    def _recheck_at(self, dispatch: Dispatch) -> float:
        """When a dispatch next needs a full read: once stale, or near its actions' expiry."""
        if dispatch.expires_at is None:
            return self._stale_at(dispatch)
        return min(self._stale_at(dispatch), dispatch.expires_at - self.settings.expiry_margin)

    def _expiring(self, dispatch: Dispatch) -> bool:
        if dispatch.expires_at is None:
            return False
        return time.time() >= dispatch.expires_at - self.settings.expiry_margin

    def _expire(self, session_id: str, call: Call, status: CallStatus) -> CallStatus:
        """Save a timeout error for an unfinished call; a result saved first still wins."""
        if status.result is not None:
            return status
        error = CallResult.fail(
            Outcome.TIMEOUT,
            f"Function {call.name!r} did not finish before the session's pending actions "
            "expire; it was answered with this error so the turn can continue",
        )
        return CallStatus(status.state, self.ledger.finish(_ref(session_id, call), error))

    def _lease_ms(self, pending: list[tuple[Call, CallStatus]]) -> int:
        """Longest tool timeout plus its grace plus the queueing budget."""
        registry = load_registry()
        timeouts = [tool_timeout(registry, c.name) for c, _ in pending]
        budget = max(timeouts) + self.settings.time_limit_grace + self.settings.queue_budget
        return int(budget * 1000)

    def _dispatch(
        self,
        session_id: str,
        dispatch: Dispatch,
        pending: list[tuple[Call, CallStatus]],
        summary: PollSummary,
    ) -> None:
        calls = [[c.turn_id, c.call_id] for c, _ in pending]
        saved = [
            result_payload(_ref(session_id, c), c.name, s.result) for c, s in pending if s.result
        ]
        to_run = [c for c, s in pending if s.result is None]
        body = submit.s(
            session_id=session_id,
            token=dispatch.token,
            calls=calls,
            lease_ms=dispatch.lease_ms,
            saved=saved,
            first_seen=dispatch.first_seen,
            source=SOURCE.name,
        ).set(**UNSTORED, **submit_reprs(session_id, len(calls)))
        if to_run:
            header = [
                call_signature(_envelope(session_id, c, dispatch)).set(**UNSTORED) for c in to_run
            ]
            _stop_listening(chord(header)(body))
        else:
            _stop_listening(body.apply_async(args=([],)))
        sent = [(turn_id, call_id) for turn_id, call_id in calls]
        self.memo.remember(session_id, dispatch.token, sent, self._recheck_at(dispatch))
        summary.sessions_dispatched += 1
        summary.calls_dispatched += len(to_run)
        summary.calls_resubmitted += len(saved)
        log.info(
            "session_id=%s dispatched %d call(s), %d saved result(s)",
            shown(session_id),
            len(to_run),
            len(saved),
        )

    def _new_dispatch(self, token: str, lease_ms: int, previous: Dispatch | None) -> Dispatch:
        """A dispatch record; the expiry of the actions is fixed at their first dispatch."""
        now = time.time()
        expires_at = previous.expires_at if previous is not None else None
        if expires_at is None and self.settings.action_expiry is not None:
            expires_at = now + self.settings.action_expiry
        first_seen = previous.first_seen if previous is not None else None
        return Dispatch(token, now, lease_ms, expires_at, first_seen or now)


def _pages(
    sessions: Iterable[Session | BadSession], size: int
) -> Iterator[list[Session | BadSession]]:
    """Group sessions as the API lists them, so the ledger is read once per page."""
    page: list[Session | BadSession] = []
    for session in sessions:
        page.append(session)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


def _stop_listening(result: AsyncResult[Any]) -> None:
    """Drop the result subscriptions Celery opened while sending; the poller never waits.

    Celery's Redis backend subscribes to each sent task's result channel (and a group's
    barrier to each member's) in the sending process. A poller never reads them, so
    without this a long-running poller would hold one pub/sub channel per dispatched call.
    """
    consumer = getattr(app.backend, "result_consumer", None)
    if consumer is None:  # a backend without pub/sub keeps no subscriptions
        return
    parent = result.parent
    members: list[AsyncResult[Any]] = (
        list(parent.results or []) if isinstance(parent, GroupResult) else []
    )
    for sent in [*members, result]:
        consumer.cancel_for(sent.id)


def _ref(session_id: str, call: Call) -> CallRef:
    return CallRef(session_id, call.turn_id, call.call_id)


def _envelope(session_id: str, call: Call, dispatch: Dispatch) -> Envelope:
    return Envelope(
        source=SOURCE.name,
        batch_id=session_id,
        turn_id=call.turn_id,
        call_id=call.call_id,
        name=call.name,
        arguments=call.arguments,
        problem=call.problem,
        deadline=dispatch.expires_at,
    )


#: The dispatches of this process, kept across the passes of a loop or of beat's tasks.
_MEMO = DispatchMemo()


@cache
def process_poller() -> Poller:
    """The poller of this process, kept so that what it knows outlives one pass.

    Its dispatch memo, the problems it already reported and its place in a long list
    serve every pass of a loop, or every poll task beat sends this worker.
    """
    return Poller(get_client(), get_ledger(SOURCE.name), get_settings(), _MEMO, reaper=new_reaper())


def new_reaper() -> Reaper:
    """A reaper on this process's ledger and broker, with its liveness settings."""
    settings = get_settings()
    return Reaper(
        get_ledger(SOURCE.name).client,
        app.connection_for_write(),
        settings.dead_after,
        settings.heartbeat,
    )


def poll_once(**overrides: Any) -> PollSummary:
    """One pass with this process's settings, ledger, API client and dispatch memo."""
    if not overrides:
        return process_poller().poll_once()
    poller = Poller(
        overrides.get("client") or get_client(),
        overrides.get("ledger") or get_ledger(SOURCE.name),
        overrides.get("settings") or get_settings(),
        overrides.get("memo", _MEMO),
    )
    return poller.poll_once()
