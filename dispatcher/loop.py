"""The polling triggers: one pass for cron, or a loop that stops cleanly on a signal."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import redis
from kombu.exceptions import OperationalError

from dispatcher.poll import PollSummary, poll_once
from handlers.errors import ToolfanError

log = logging.getLogger("toolfan.poll")

#: Failures that end one pass with a clear message: the API, the ledger or the broker.
PASS_ERRORS: tuple[type[BaseException], ...] = (ToolfanError, OperationalError, redis.RedisError)


def describe(exc: BaseException) -> str:
    """A one-line description of a failed pass."""
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def run_once(emit: Callable[[str], None], poll: Callable[[], PollSummary] = poll_once) -> int:
    """One pass; 0 on success, 1 with a one-line message on stderr when it failed."""
    try:
        emit(poll().line())
    except PASS_ERRORS as exc:
        print(f"toolfan: poll failed: {describe(exc)}", file=sys.stderr, flush=True)
        return 1
    return 0


def run_loop(
    interval: float,
    emit: Callable[[str], None],
    stop: threading.Event | None = None,
    poll: Callable[[], PollSummary] = poll_once,
) -> int:
    """Poll every ``interval`` seconds until SIGTERM, SIGINT or ``stop`` is set.

    A failed pass is reported and the loop goes on: the next pass recovers by itself.
    """
    stop = stop or _stop_on_signals()
    while not stop.is_set():
        started = time.monotonic()
        run_once(emit, poll)
        stop.wait(max(0.0, interval - (time.monotonic() - started)))
    emit("poll: stopped")
    return 0


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
