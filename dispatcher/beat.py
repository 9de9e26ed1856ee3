"""The ``toolfan.poll`` task, for Celery beat: one ``poll_once`` pass per beat.

It lives with the triggers, not in the engine: a worker knows it because the sources'
modules import it (see :mod:`tasks.sources`), so ``tasks`` names no trigger.
"""

from __future__ import annotations

from typing import Any

from dispatcher.pollers import poll_sources
from tasks.app import app
from tasks.queues import POLL_TASK


@app.task(name=POLL_TASK)
def poll() -> dict[str, Any]:
    """Run one poll pass over every configured source; returns its summary counters."""
    return poll_sources().as_dict()
