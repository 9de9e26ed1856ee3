"""``toolfan resubmit``: send saved results again, once an operator fixed what stopped them.

A batch the API refused for good is *abandoned*: its calls are final in the ledger, so no
poll sends them again. When the cause was on toolfan's side after all (a setting, a proxy,
a bug fixed since), the saved results are still there. Resubmitting a session reads it
from the API (the authority on what is still pending), reopens the abandoned (or
submitted) calls it still waits for, keeping their results, and dispatches the session
through the same claim and chord a poll uses: saved results go straight to one batch,
calls that never ran run first. Nothing runs twice, and a session that waits for nothing
is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.errors import APIError, NotFoundError
from dispatcher.models import Session
from dispatcher.poll import Poller, PollSummary
from handlers.text import shown
from tasks.ledger import FINAL_STATES, CallRef, Ledger


@dataclass(frozen=True)
class Resubmitted:
    """What resubmitting one session did."""

    session_id: str
    reopened: int
    summary: PollSummary | None
    note: str | None = None

    def line(self) -> str:
        """One line for the operator."""
        head = f"resubmit: session {shown(self.session_id)}"
        if self.note is not None:
            return f"{head}: {self.note}"
        assert self.summary is not None
        s = self.summary
        return (
            f"{head}: {self.reopened} call(s) reopened; {s.calls_resubmitted} saved result(s) "
            f"sent again, {s.calls_dispatched} call(s) dispatched, {s.skipped_in_flight} "
            "in flight"
        )


def resubmit_session(
    session_id: str, poller: Poller, retrieve: Callable[[str], Session]
) -> Resubmitted:
    """Reopen and dispatch one session's pending calls."""
    try:
        session = retrieve(session_id)
    except NotFoundError:
        return Resubmitted(session_id, 0, None, "the API has no such session")
    except APIError as exc:
        return Resubmitted(session_id, 0, None, f"not read: {exc.message}")
    refs = [CallRef(session_id, c.turn_id, c.call_id) for c in session.function_calls]
    if not refs:
        return Resubmitted(session_id, 0, None, "the API lists no pending function call")
    reopened = poller.ledger.reopen(refs, FINAL_STATES)
    return Resubmitted(session_id, reopened, poller.dispatch_sessions([session]))


def abandoned_sessions(ledger: Ledger) -> list[str]:
    """Every session holding an abandoned call, from a scan of the ledger."""
    return ledger.batches_with_state("abandoned")
