"""The ``toolfan.poll`` task, for Celery beat: one ``poll_once`` pass per beat."""

from __future__ import annotations

from dispatcher.poll import poll_once
from tasks.app import app
from tasks.queues import POLL_TASK


@app.task(name=POLL_TASK)
def poll() -> dict[str, int]:
    """Run one poll pass; returns its summary counters."""
    return poll_once().as_dict()
