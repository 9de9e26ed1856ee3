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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from dispatcher.client import AgentsClient
from dispatcher.declared import declared_functions
from dispatcher.listing import ListBudget
from dispatcher.models import BadSession, FunctionCall, Glanced, Session, glance, parse_session
from dispatcher.once import OnceLog
from dispatcher.sources.agents import SOURCE, get_client
from handlers import jsonsafe
from handlers.text import shown
from tasks import metrics
from tasks.dispatch import Batch, DispatchCounts, Dispatcher, PendingCall, count_into
from tasks.ledger import Ledger
from tasks.liveness import Reaper
from tasks.memo import DispatchMemo
from tasks.runtime import get_ledger, new_reaper
from tasks.settings import Settings, get_settings

log = logging.getLogger("toolfan.poll")

#: Sessions handled per ledger round trip: one API page.
PAGE = 100


def pending_call(call: FunctionCall, problem: str | None) -> PendingCall:
    """The pending call of a listed ``function_call`` (without arguments over a limit)."""
    arguments = None if problem is not None else call.arguments
    return PendingCall(call.turn_id, call.call_id, call.name, arguments, problem)


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

    def add(self, counts: DispatchCounts) -> None:
        """Count in what the dispatcher did."""
        count_into(self, counts, "sessions_dispatched")

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
    """One pass over the sessions, with its collaborators injected for tests.

    Listing and reading sessions is the Agents source's part; what to do with each
    session's pending calls (claims, chords, takeovers) is the engine's
    (:class:`tasks.dispatch.Dispatcher`).
    """

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
        self.stop = stop
        self.dispatcher = Dispatcher(SOURCE.name, ledger, settings, memo, reaper, "session")
        self.reported = OnceLog(log)
        self._resume: str | None = None

    @property
    def memo(self) -> DispatchMemo:
        """The dispatches this poller made, kept across passes."""
        return self.dispatcher.memo

    def poll_once(self) -> PollSummary:
        """List every matching session and dispatch the ones with undispatched calls."""
        summary = PollSummary()
        started = time.perf_counter()
        self.dispatcher.begin_pass()
        listing = self.client.list_sessions(
            agent_id=self.settings.agent_id,
            metadata=self.settings.session_metadata or None,
            after=self._resume,
            budget=ListBudget(
                self.settings.poll_max_pages,
                self.settings.poll_max_seconds,
                self.stop.is_set if self.stop is not None else None,
            ),
            glance=self._glance,
        )
        for page in _pages(listing, PAGE):
            summary.sessions_seen += len(page)
            self.dispatch_sessions(page, summary)
        self._end_listing(listing.cut, listing.last_id, summary)
        summary.orphans_restored = self.dispatcher.end_pass()
        metrics.POLL_DURATION.observe(time.perf_counter() - started)
        metrics.SESSIONS_PENDING.set(summary.sessions_pending)
        metrics.STALE_CLAIMS.set(summary.stale_claims)
        log.info("%s", summary.line(), extra=summary.as_dict())
        return summary

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

    def _glance(self, raw: Any) -> Glanced | None:
        """The ids alone of a listed session this process dispatched (else a full read)."""
        if not isinstance(raw, dict) or not self.dispatcher.remembers(raw.get("id")):
            return None
        return glance(raw)

    def _still_to_read(
        self, page: Sequence[Session | BadSession | Glanced], summary: PollSummary
    ) -> list[Session | BadSession]:
        """The page without the glanced sessions still in flight under our own claim.

        Those count as pending and skipped; any other glanced one is read in full now.
        """
        glanced = [s for s in page if isinstance(s, Glanced)]
        if not glanced:
            return [s for s in page if not isinstance(s, Glanced)]
        counts = DispatchCounts()
        ours = self.dispatcher.own_in_flight([(g.id, g.calls) for g in glanced], counts)
        summary.add(counts)
        summary.sessions_pending += len(ours)
        return [
            parse_session(s.raw) if isinstance(s, Glanced) else s
            for s in page
            if not (isinstance(s, Glanced) and s.id in ours)
        ]

    def dispatch_sessions(
        self, page: Sequence[Session | BadSession | Glanced], summary: PollSummary | None = None
    ) -> PollSummary:
        """Handle up to a page of sessions with one ledger round trip for all of them.

        The poll pass feeds it the list's pages; a targeted dispatch (``toolfan resubmit``,
        a pushed event) feeds it one retrieved session, through the same claims and chords.
        """
        summary = summary if summary is not None else PollSummary()
        waiting = []
        for session in self._still_to_read(page, summary):
            if isinstance(session, BadSession):
                self._bad_session(session, summary)
                continue
            summary.skipped_other += sum(1 for a in session.other_actions if a.problem is None)
            calls = self._unique_calls(session, summary)
            if calls:
                summary.sessions_pending += 1
                waiting.append(_batch(session, calls))
        counts = DispatchCounts()
        self.dispatcher.dispatch(waiting, counts)
        summary.add(counts)
        return summary

    def _bad_session(self, bad: BadSession, summary: PollSummary) -> None:
        summary.errors += 1
        metrics.POLL_ERRORS.labels("session").inc()
        self.reported.error(
            bad.id, "session_id=%s skipped: %s", shown(bad.id or "<none>"), bad.problem
        )

    def _unique_calls(self, session: Session, summary: PollSummary) -> list[PendingCall]:
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
        seen: dict[tuple[str, str], PendingCall] = {}
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
            seen[(call.turn_id, call.call_id)] = pending_call(call, self._problem(call))
        return list(seen.values())

    def _problem(self, call: FunctionCall) -> str | None:
        return jsonsafe.check(
            call.arguments,
            max_depth=self.settings.max_depth,
            max_bytes=self.settings.max_argument_bytes,
        )


def _pages(
    sessions: Iterable[Session | BadSession | Glanced], size: int
) -> Iterator[list[Session | BadSession | Glanced]]:
    """Group sessions as the API lists them, so the ledger is read once per page."""
    page: list[Session | BadSession | Glanced] = []
    for session in sessions:
        page.append(session)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


def _batch(session: Session, calls: list[PendingCall]) -> Batch:
    agent = session.agent
    return Batch(
        session.id,
        calls,
        agent_id=agent.id if agent is not None else None,
        metadata=session.metadata or None,
        declared=declared_functions(agent.tools) if agent is not None else None,
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
