"""Calls on the task's own thread under a timer: how a prefork pool process times a call.

A runner thread (:mod:`handlers.threads`) lets the task answer at the deadline whatever the
call does, but it costs every call two thread switches: the hand-off to the runner and the
wake-up of the task's thread when the call returns, 60 to 130 us of CPU a call, an eighth
to a fifth of what toolfan's own work on a no-op call costs. A prefork pool process runs
its task on its main thread, the one thread that receives signals, so there the call runs
on that thread instead, under an interval timer:

* at the deadline ``SIGALRM`` raises :class:`Overran` inside the call (between two
  bytecodes, or out of a blocking system call such as a sleep or a socket read, which
  Python retries after running the handler), and the call is answered as timed out. A
  call that returns after its deadline is answered as timed out too, as a runner's would;
* a call that does not stop (it swallows the exception, or sits in C code that never
  returns to the interpreter) is taken over by a watchdog thread :data:`STOP_GRACE`
  seconds after the deadline: :attr:`Alarm.on_stuck` is called there, and toolfan's
  worker saves the call's timed-out answer and ends the process (``tasks/overrun.py``),
  whose message the broker then delivers again and which that saved answer settles. A
  runner would have answered at once and the process would have been recycled after: the
  answer is the same, about a second later.

Only a process that called :meth:`Alarm.enable` on its main thread uses it (toolfan's
prefork pool processes do), and only while the ``SIGALRM`` handler is still its own: a
tool that installs one of its own sends the next calls back to the runner threads.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub: the C module of signal
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from handlers.context import CallContext
from handlers.threads import CallTimeout

log = logging.getLogger("toolfan.handlers")

#: Seconds a call gets past its deadline to stop before the watchdog takes over.
STOP_GRACE = 0.5
#: Seconds between the watchdog's looks at the call in progress.
WATCH_EVERY = 0.1


class Overran(BaseException):
    """Raised inside a call at its deadline by the timer's handler.

    A BaseException, so that a tool's ``except Exception`` does not swallow it.
    """


class _Call:
    """The call in progress: when it must end, and what the watchdog needs to answer it."""

    __slots__ = ("context", "deadline", "rang", "timeout")

    def __init__(self, timeout: float, context: CallContext | None) -> None:
        self.timeout = timeout
        self.context = context
        self.deadline = time.monotonic() + timeout
        self.rang = False

    def overran(self) -> bool:
        """Whether the call ran past its deadline (a runner's wait would have timed out)."""
        return self.rang or time.monotonic() >= self.deadline


#: What the watchdog calls with a call that would not stop: its context and its timeout.
OnStuck = Callable[[CallContext | None, float], None]


class Alarm:
    """Times calls on the main thread with ``SIGALRM``; one per process (:data:`ALARM`)."""

    def __init__(self) -> None:
        self._handler = self._ring
        self._call: _Call | None = None
        self._armed = False
        self._enabled = False
        self.on_stuck: OnStuck | None = None

    def enable(self, on_stuck: OnStuck) -> bool:
        """Time this process's calls on its main thread from now on; whether it can.

        Called on the main thread (only there can a signal handler be set), on a platform
        with interval timers.
        """
        if not hasattr(signal, "setitimer") or not _on_main_thread():
            return False
        signal.signal(signal.SIGALRM, self._handler)
        self.on_stuck = on_stuck
        if not self._enabled:
            threading.Thread(target=self._watch, name="toolfan-watchdog", daemon=True).start()
        self._enabled = True
        return True

    def usable(self) -> bool:
        """Whether a call made now runs on this thread under the timer.

        Not inside another timed call (a tool that runs a tool): that one keeps the timer,
        and the inner call goes to a runner thread. The handler is read from ``_signal``,
        the C module ``signal`` wraps: ``signal.getsignal`` also tries to turn it into an
        enum, which raises and catches a ValueError for every handler that is a function
        (1.7 us a call, against 0.03).
        """
        return (
            self._enabled
            and self._call is None
            and _on_main_thread()
            and _signal.getsignal(signal.SIGALRM) is self._handler
        )

    def run(self, call: Callable[[], Any], timeout: float, context: CallContext | None) -> Any:
        """``call()``'s value or exception, or :class:`CallTimeout` once it overran."""
        current = _Call(timeout, context)
        self._call = current
        try:
            try:
                self._armed = True
                signal.setitimer(signal.ITIMER_REAL, timeout)
                try:
                    value = call()
                finally:
                    self._disarm()
            except BaseException:
                self._disarm()
                if current.overran():  # the alarm, or what the call made of it
                    raise CallTimeout from None
                raise
            if current.overran():
                raise CallTimeout  # it swallowed the alarm, or returned just too late
            return value
        finally:
            self._call = None

    def _disarm(self) -> None:
        self._armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)

    def _ring(self, signum: int, frame: Any) -> None:
        """The ``SIGALRM`` handler: stop the call in progress, once."""
        current = self._call
        if not self._armed or current is None:
            return
        self._armed = False
        current.rang = True
        raise Overran

    def _watch(self) -> None:
        """Hand a call still running :data:`STOP_GRACE` past its deadline to ``on_stuck``."""
        handled: _Call | None = None
        while True:
            time.sleep(WATCH_EVERY)
            current = self._call
            if current is None or current is handled:
                continue
            if time.monotonic() < current.deadline + STOP_GRACE:
                continue
            handled = current
            try:
                if self.on_stuck is not None:
                    self.on_stuck(current.context, current.timeout)
            except Exception:  # the watchdog stays on watch for the calls to come
                log.exception("answering a call that would not stop failed")


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


#: The process's alarm, enabled by toolfan's prefork pool processes.
ALARM = Alarm()
