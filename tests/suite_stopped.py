"""Not collected by the suite: the run ``tests/test_suite_signals.py`` stops with a signal.

Its one test starts the session's worker, writes the pids of that worker and of the
suite's Redis to ``TOOLFAN_TEST_STOPPED_AT``, and waits to be stopped.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import redis

from tests.services import Worker


def test_waits_to_be_stopped(worker: Worker) -> None:
    with redis.Redis.from_url(os.environ["TOOLFAN_REDIS_URL"]) as client:
        redis_pid = int(client.info("server")["process_id"])
    state = {"worker": worker.proc.pid, "redis": redis_pid}
    target = Path(os.environ["TOOLFAN_TEST_STOPPED_AT"])
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(state))
    partial.rename(target)  # whole or absent: the waiting test never reads half of it
    time.sleep(120)
