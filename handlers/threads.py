"""Threads that run tool functions under a timeout, kept for reuse between calls.

A function that overruns its timeout cannot simply be stopped, so every call runs in a
thread other than the task's own, and the task answers at the deadline. Starting a thread
per call cost about a tenth of a millisecond of CPU, a noticeable share of a short call;
these threads wait for their next call instead, and new ones start whenever none is idle,
so a hung call never holds up another.

An overrun call is not left to burn a core for good. Its thread gets :class:`CallAbandoned`
raised inside it (CPython's ``PyThreadState_SetAsyncExc``, the way a debugger interrupts a
thread), which ends pure-Python loops at once and blocking calls when they return; a
thread that was given that exception is never reused, since the exception may arrive at
any later point in it. A thread that still runs a moment later is *stuck* (it swallowed
the exception, or sits in C code): :attr:`RunnerPool.on_stuck` is told, so a prefork
worker can recycle its child process once the task has answered, and
:meth:`RunnerPool.stuck` counts them for the metrics. Only ``threading`` primitives are
used, which gevent's monkey-patching turns into greenlet-friendly ones; under gevent no
exception is injected (a greenlet that never yields cannot be reached anyway).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

#: Seconds an abandoned call gets to end once interrupted before it counts as stuck.
STOP_GRACE = 0.05
#: Seconds a retired runner lingers, so the exception meant for it never meets a new thread
#: that reuses its id.
LINGER = 1.0


class CallTimeout(Exception):
    """The function did not return within its tool's timeout."""


class CallAbandoned(BaseException):
    """Raised inside a call that overran its timeout.

    A BaseException, so that a tool's ``except Exception`` does not swallow it.
    """


class _Job:
    """One call handed to a runner; its end is a lock released once.

    A bare lock, not an ``Event``: the hand-off is on every call's path, and an event's
    condition and waiter list cost about as much again as the two thread switches.
    """

    __slots__ = ("_ended", "call", "error", "finished", "value")

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self._ended = threading.Lock()
        self._ended.acquire()
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.call()
        except BaseException as exc:  # handed to the waiting thread, which maps it
            self.error = exc
        finally:
            self.finished = True
            self._ended.release()

    def wait(self, timeout: float) -> bool:
        """Whether the call ended within ``timeout`` seconds (or before)."""
        if not self._ended.acquire(timeout=max(0.0, timeout)):
            return False
        self._ended.release()  # so that a later wait sees the end too
        return True


class _Runner:
    """One daemon thread running the jobs handed to it, one at a time.

    ``_wake`` is held while the runner has nothing to do; :meth:`start` releases it.
    """

    def __init__(self, pool: RunnerPool) -> None:
        self._pool = pool
        self._job: _Job | None = None
        self._wake = threading.Lock()
        self._wake.acquire()
        self.abandoned = False
        self.thread = threading.Thread(target=self._loop, name="toolfan-call", daemon=True)
        self.thread.start()

    def start(self, job: _Job) -> None:
        self._job = job
        self._wake.release()

    def _loop(self) -> None:
        try:
            while not self.abandoned:
                self._wake.acquire()
                job, self._job = self._job, None
                if job is not None:
                    job.run()
                self._pool.idle(self)
            threading.Event().wait(LINGER)
        except CallAbandoned:  # arrived after the call ended: this thread just retires
            pass


class RunnerPool:
    """Idle runner threads, most recently used first; a new one whenever none is idle.

    Attributes:
        on_stuck: Called (with no arguments) when an abandoned call would not stop.
    """

    def __init__(self) -> None:
        self._idle: list[_Runner] = []
        self._abandoned: list[_Job] = []
        self._lock = threading.Lock()
        self.on_stuck: Callable[[], None] | None = None
        os.register_at_fork(after_in_child=self._forget)

    def run(self, call: Callable[[], Any], timeout: float) -> Any:
        """Run ``call`` in a runner thread; its value, its exception, or :class:`CallTimeout`."""
        job = _Job(call)
        with self._lock:
            runner = self._idle.pop() if self._idle else None
        runner = runner or _Runner(self)
        runner.start(job)
        if not job.wait(timeout):
            self._abandon(runner, job)
            raise CallTimeout
        if job.error is not None:
            raise job.error
        return job.value

    def idle(self, runner: _Runner) -> None:
        """Take a runner back once its job is over, unless it was abandoned."""
        with self._lock:
            if not runner.abandoned:
                self._idle.append(runner)

    def stuck(self) -> int:
        """Abandoned calls that still run."""
        with self._lock:
            self._abandoned = [job for job in self._abandoned if not job.finished]
            return len(self._abandoned)

    def _abandon(self, runner: _Runner, job: _Job) -> None:
        """Retire the runner of an overrun call, try to stop the call, report it if stuck."""
        with self._lock:
            if job.finished:  # it ended just now: the runner is fine and stays in use
                return
            runner.abandoned = True
            self._abandoned.append(job)
        if not _green() and runner.thread.ident is not None and runner.thread.is_alive():
            _raise_in(runner.thread.ident, CallAbandoned)
            if job.wait(STOP_GRACE):
                return
        if self.on_stuck is not None:
            self.on_stuck()

    def _forget(self) -> None:
        """A forked child has none of its parent's threads: start afresh."""
        self._idle = []
        self._abandoned = []
        self._lock = threading.Lock()


def _raise_in(thread_id: int, exc: type[BaseException]) -> None:
    """Schedule ``exc`` in another thread; it fires at that thread's next bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


def _green() -> bool:
    """Whether gevent has patched threading (runner "threads" are then greenlets)."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


#: The process's runner threads.
RUNNERS = RunnerPool()
