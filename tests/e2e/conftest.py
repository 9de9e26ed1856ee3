"""Fixtures of the end-to-end tests that more than one module uses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import INLINE_QUEUE, worker_env
from tests.services import Worker


def inline_worker() -> Worker:
    """A threads worker with concurrency 8 on the inline tools' queue only, started."""
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / "inline-worker.log"
    args = ["-P", "threads", "-c", "8", "-n", "inline@%h", "--without-mingle"]
    w = Worker([*args, "--without-gossip", "-Q", INLINE_QUEUE], log, worker_env())
    w.wait_ready()
    return w


@pytest.fixture(scope="module")
def threads_worker(worker: Worker) -> Iterator[Worker]:
    """The inline tools' worker, for the module (after the session's worker)."""
    w = inline_worker()
    try:
        yield w
    finally:
        w.stop()
