"""Handing the fleet runs to answer: the Assistants protocol lists no waiting runs."""

from __future__ import annotations

from collections.abc import Iterable

import redis

from tasks.settings import get_settings


def watch_run(thread_id: str, run_id: str) -> bool:
    """Have the fleet answer this run's tool calls until it is over; True if newly watched.

    The pollers of ``TOOLFAN_SOURCES=assistants`` read the run every pass, dispatch each
    ``requires_action`` phase once, and stop watching once the run completes, fails, is
    cancelled or passes its ``expires_at``. Watching a run twice is harmless.

    Raises:
        ValueError: an id is not a string, is empty, is ``.`` or ``..``, or is too long
            for a URL (the run could never be read).
        redis.RedisError: the ledger's Redis (``TOOLFAN_REDIS_URL``) cannot be reached.
    """
    return watch_runs([(thread_id, run_id)]) == 1


def watch_runs(runs: Iterable[tuple[str, str]]) -> int:
    """:func:`watch_run` for many runs at once; how many were newly watched."""
    from dispatcher.sources.assistants_watch import Watches

    client = redis.Redis.from_url(get_settings().redis_url, decode_responses=True)
    try:
        return Watches(client).add(runs)
    finally:
        client.close()
