"""A call on a pool process's own thread that would not stop: answered, then the process ends.

A prefork pool process runs each call on its main thread under a timer
(:mod:`handlers.alarm`). A call that swallows the timer's exception, or sits in C code that
never returns to the interpreter, keeps that thread, so the task cannot answer it. The
watchdog thread then calls :func:`answer_and_leave`: it saves the call's timed-out answer
in the ledger, as the task would have, and ends the process. The worker's main process
sees its pool process lost and puts the message back (``task_reject_on_worker_lost``); the
copy delivered again finds the saved answer and returns it without running the call, and
the pool starts a fresh process in place of the one that held the runaway.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

from handlers.context import CallContext
from handlers.result import Outcome
from handlers.runner import timed_out, where
from tasks import metrics
from tasks.ledger import CallRef
from tasks.runtime import call_ids, get_ledger, get_limits

log = logging.getLogger("toolfan.execute")

#: The exit status of a pool process ended for a call that would not stop (EX_SOFTWARE).
EXIT_STUCK = 70


def answer_and_leave(context: CallContext | None, timeout: float) -> None:
    """Save the timed-out answer of the call in ``context``, then end this process."""
    ids: dict[str, Any] = {}
    saved = False
    if context is not None:
        ref = CallRef(context.batch_id, context.turn_id, context.call_id)
        ids = call_ids(context.source, ref, context.function)
        saved = _save(context, ref, timeout, ids)
    log.error(
        "%s the call overran its timeout of %g s and would not stop; %s; recycling this "
        "pool process",
        where(ids),
        timeout,
        "its answer is saved for the redelivered message"
        if saved
        else "its answer could not be saved, so the redelivered message runs it again",
        extra=ids,
    )
    leave()


def _save(context: CallContext, ref: CallRef, timeout: float, ids: dict[str, Any]) -> bool:
    """Save the timed-out answer and count it (the copy that returns it counts nothing)."""
    try:
        get_ledger(context.source).finish(ref, timed_out(context.function, timeout, get_limits()))
    except Exception as exc:  # the process ends either way; the redelivery settles the call
        log.error("%s saving the timed-out answer failed: %s", where(ids), exc, extra=ids)
        return False
    label = metrics.function_label(context.function, True)  # it ran, so it is registered
    metrics.CALLS.labels(label, Outcome.TIMEOUT.value).inc()
    return True


def leave() -> None:
    """End this process at once: the thread that holds the call cannot be joined."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream
            stream.flush()
    os._exit(EXIT_STUCK)
