"""The ``toolfan.poll`` task, for Celery beat: one ``poll_once`` pass per beat.

It lives with the triggers, not in the engine: a worker knows it because the sources'
modules import it (see :mod:`tasks.sources`), so ``tasks`` names no trigger.

A worker on threads may take a beat's poll while a pass of the last one still runs in the
same process, on the same pollers (their memo, their place in a long list, the runs'
rests): that beat is skipped, since the running pass does its work. Separate processes
(prefork, other hosts) still poll side by side; claims keep their dispatches apart.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from dispatcher.pollers import poll_sources
from tasks.app import app
from tasks.queues import POLL_TASK

log = logging.getLogger("toolfan.poll")

#: Held while this process runs a beat's pass.
_PASSING = threading.Lock()


@app.task(name=POLL_TASK)
def poll() -> dict[str, Any]:
    """Run one poll pass over every configured source; returns its summary counters.

    Returns ``{"skipped": 1}`` instead when a pass already runs in this process.
    """
    if not _PASSING.acquire(blocking=False):
        log.info("poll: skipped, a pass of this process is still running")
        return {"skipped": 1}
    try:
        return poll_sources().as_dict()
    finally:
        _PASSING.release()
