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
from dispatcher.poll import process_poller
from dispatcher.webhook.metrics import PUSH_TO_DISPATCH, PUSHES
from handlers.text import shown
from tasks.app import app
from tasks.queues import PUSH_TASK

log = logging.getLogger("toolfan.webhook")


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
    summary = poller.dispatch_sessions([session])
    result = "dispatched" if summary.sessions_dispatched else "nothing_pending"
    PUSHES.labels(result).inc()
    if received_at is not None:
        PUSH_TO_DISPATCH.observe(max(0.0, time.time() - received_at))
    log.info("%s pushed: %s", sid, summary.line())
    return result
