"""Threads that run plain tool functions under a timeout, kept for reuse between calls.

A function that overruns its timeout cannot be stopped, only abandoned, so every call runs
in a thread other than the task's own. Starting a thread per call cost about a tenth of a
millisecond of CPU, a noticeable share of a short call; these threads wait for their next
call instead. A thread whose call overran simply finishes it later and then rejoins the
idle ones, and new threads are started whenever none is idle, so a hung call never holds
up another. Only ``threading`` primitives are used, which gevent's monkey-patching turns
into greenlet-friendly ones.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any


class CallTimeout(Exception):
    """The function did not return within its tool's timeout."""


class _Job:
    __slots__ = ("call", "done", "error", "value")

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.call()
        except BaseException as exc:  # handed to the waiting thread, which maps it
            self.error = exc
        finally:
            self.done.set()


class _Runner:
    """One daemon thread running the jobs handed to it, one at a time."""

    def __init__(self, pool: RunnerPool) -> None:
        self._pool = pool
        self._job: _Job | None = None
        self._wake = threading.Event()
        threading.Thread(target=self._loop, name="toolfan-call", daemon=True).start()

    def start(self, job: _Job) -> None:
        self._job = job
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            job, self._job = self._job, None
            if job is not None:
                job.run()
            self._pool.idle(self)


class RunnerPool:
    """Idle runner threads, most recently used first; a new one whenever none is idle."""

    def __init__(self) -> None:
        self._idle: list[_Runner] = []
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def run(self, call: Callable[[], Any], timeout: float) -> Any:
        """Run ``call`` in a runner thread; its value, its exception, or :class:`CallTimeout`."""
        job = _Job(call)
        with self._lock:
            runner = self._idle.pop() if self._idle else None
        (runner or _Runner(self)).start(job)
        if not job.done.wait(timeout):
            raise CallTimeout
        if job.error is not None:
            raise job.error
        return job.value

    def idle(self, runner: _Runner) -> None:
        """Take a runner back once its job is over."""
        with self._lock:
            self._idle.append(runner)

    def _forget(self) -> None:
        """A forked child has none of its parent's threads: start afresh."""
        self._idle = []
        self._lock = threading.Lock()


#: The process's runner threads.
RUNNERS = RunnerPool()
