"""The polling triggers: one pass for cron, or a loop that stops cleanly on a signal.

A signal stops the loop within about a second, whatever the pass is doing: the pass checks
for it between pages and sessions, and if it is stuck in a request or a retry pause one
second later an alarm interrupts it (a claim it had just taken is freed on the way out,
and any other is a lease that runs out by itself). A pass that fails, however it fails, is
one line on stderr, and the loop goes on: the next pass recovers by itself.
"""

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

from dispatcher.pollers import Summary, poll_sources, process_pollers
from dispatcher.wake import Bell
from handlers.errors import ToolfanError

log = logging.getLogger("toolfan.poll")

#: Failures that end one pass with a clear message: the API, the ledger or the broker.
PASS_ERRORS: tuple[type[BaseException], ...] = (ToolfanError, OperationalError, redis.RedisError)
#: Seconds a pass gets to reach a safe point after a stop signal before it is interrupted.
STOP_GRACE = 0.9
#: Seconds between two passes over newly watched runs: each reads the whole watch list
#: (one HGETALL), so a steady stream of watches is read in a few passes a second, not one
#: pass per watch.
WAKE_GAP = 0.05


class Interrupted(BaseException):
    """Raised into a pass that did not stop by itself in time after a stop signal."""


def describe(exc: BaseException) -> str:
    """A one-line description of a failed pass."""
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    line = f"{type(exc).__name__}: {text}".replace("\n", " ")
    return line if len(line) <= 500 else f"{line[:500]}..."


def run_once(emit: Callable[[str], None], poll: Callable[[], Summary] = poll_sources) -> int:
    """One pass; 0 on success, 1 with a one-line message on stderr when it failed."""
    try:
        emit(poll().line())
    except PASS_ERRORS as exc:
        print(f"toolfan: poll failed: {describe(exc)}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:  # a bug must not end a loop that would recover next pass
        log.error("poll pass failed unexpectedly", exc_info=True)
        print(f"toolfan: poll failed: {describe(exc)}", file=sys.stderr, flush=True)
        return 1
    return 0


def run_loop(
    interval: float,
    emit: Callable[[str], None],
    stop: threading.Event | None = None,
    poll: Callable[[], Summary] | None = None,
) -> int:
    """Poll every ``interval`` seconds until SIGTERM, SIGINT or ``stop`` is set.

    Without ``stop``, signals stop the loop (the main thread's job); without ``poll``,
    this process's poller runs, checking the stop between pages. A loop of this
    process's own poller over runs (``TOOLFAN_SOURCES`` with ``assistants``) also reads
    newly watched runs between its passes, as soon as a watch rings the bell of
    :mod:`dispatcher.wake`.
    """
    guard = _SignalGuard() if stop is None else None
    stop = guard.stop if guard is not None else stop
    assert stop is not None
    bell: Bell | None = None
    poll_new: Callable[[], Summary] | None = None
    if poll is None:
        poller = process_pollers()
        poller.stop = stop
        poll = poller.poll_once
        poll_new = getattr(poller, "poll_new", None)
        if poll_new is not None and guard is not None:
            bell = guard.bell = _listening()
    try:
        while not stop.is_set():
            started = time.monotonic()
            _guarded(guard, emit, poll)
            deadline = started + interval
            while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
                if bell is None or poll_new is None:
                    stop.wait(left)
                elif bell.wait(left) and not stop.is_set():
                    _guarded(guard, emit, poll_new)
                    stop.wait(min(WAKE_GAP, max(0.0, deadline - time.monotonic())))
    except Interrupted:
        pass
    finally:
        if bell is not None:
            bell.close()
        if guard is not None:
            guard.disarm()
    emit("poll: stopped")
    return 0


def _listening() -> Bell:
    """A bell listening on the runs' ledger Redis."""
    from dispatcher.sources.assistants import NAME
    from tasks.runtime import get_ledger

    return Bell(get_ledger(NAME).client).start()


def _guarded(
    guard: _SignalGuard | None, emit: Callable[[str], None], poll: Callable[[], Summary]
) -> None:
    """One pass, which a stop signal interrupts if it does not stop by itself in time."""
    if guard is not None:
        guard.running = True
    run_once(emit, poll)
    if guard is not None:
        guard.running = False


class _SignalGuard:
    """SIGTERM and SIGINT set :attr:`stop`; an alarm interrupts a pass still running later."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.running = False
        #: Rung with the stop, so that a loop waiting on it stops at once too.
        self.bell: Bell | None = None
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGALRM, self._on_alarm)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop.set()
        if self.bell is not None:
            self.bell.ring()
        if self.running:
            signal.setitimer(signal.ITIMER_REAL, STOP_GRACE)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.running:
            raise Interrupted

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
