"""The ``toolfan.push`` task: retrieve the one session a delivery named, and dispatch it.

It runs on ``toolfan.poll``, off the intake's request path, and goes through the poller's
own ``dispatch_sessions``: the same claims, ledger and chords as a poll pass, so a pushed
session and a polled one meet in the ledger, and whichever claims first dispatches it
(the other sees the claim, or the calls submitted). No list request is made.
"""

from __future__ import annotations

import logging
import time

from dispatcher.errors import APIError, NotFoundError
from dispatcher.models import Session
from dispatcher.poll import process_poller
from dispatcher.webhook.metrics import PUSH_TO_DISPATCH, PUSHES
from handlers.text import shown
from tasks.app import app
from tasks.queues import PUSH_TASK
from tasks.settings import Settings

log = logging.getLogger("toolfan.webhook")


def outside_filters(session: Session, settings: Settings) -> str | None:
    """Why a pushed session is not this fleet's (the poll's filters), or None if it is.

    A fleet that polls one agent's sessions (``TOOLFAN_AGENT_ID``) or those with some
    metadata (``TOOLFAN_SESSION_METADATA``) answers only those when they are pushed too:
    an endpoint may receive every session of the project.
    """
    if settings.agent_id and (session.agent is None or session.agent.id != settings.agent_id):
        return f"another agent's (TOOLFAN_AGENT_ID={settings.agent_id})"
    wanted = settings.session_metadata
    if any(session.metadata.get(k) != v for k, v in wanted.items()):
        return "outside TOOLFAN_SESSION_METADATA"
    return None


@app.task(name=PUSH_TASK, ignore_result=True)
def push(session_id: str, received_at: float | None = None) -> str:
    """Dispatch the pending calls of one pushed session; returns what it did."""
    poller = process_poller()
    sid = f"session_id={shown(session_id)}"
    try:
        session = poller.client.retrieve_session(session_id)
    except NotFoundError:
        PUSHES.labels("gone").inc()
        log.info("%s pushed, but the API has no such session", sid)
        return "gone"
    except APIError as exc:  # the safety-net poll finds it later
        PUSHES.labels("unreadable").inc()
        log.warning("%s pushed, not read: %s", sid, exc.message)
        return "unreadable"
    skipped = outside_filters(session, poller.settings)
    if skipped is not None:
        PUSHES.labels("filtered").inc()
        log.info("%s pushed, left alone: %s", sid, skipped)
        return "filtered"
    summary = poller.dispatch_sessions([session])
    result = "dispatched" if summary.sessions_dispatched else "nothing_pending"
    PUSHES.labels(result).inc()
    if received_at is not None:
        PUSH_TO_DISPATCH.observe(max(0.0, time.time() - received_at))
    log.info("%s pushed: %s", sid, summary.line())
    return result
