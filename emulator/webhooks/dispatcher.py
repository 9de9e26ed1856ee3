"""The delivery engine: a timed queue drained by worker threads, off every request path.

Threads rather than tasks on the server's event loop: the state that publishes events is
scripted from test threads and from the app alike, and may live without any server at all,
so deliveries must not depend on a loop being there. Each worker owns an ``httpx.Client``.
Workers start on demand and leave after a few idle seconds, so an emulator that never
pushes anything never holds a thread. ``clear`` abandons everything queued and in flight
at once: a test's reset must not wait for a slow receiver of the previous test.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import httpx

from emulator.webhooks.sender import new_client

Job = TypeVar("Job")
#: A handler performs one job and may ask for a follow-up: ``(delay in seconds, job)``.
FollowUp = tuple[float, Job]
#: Seconds a worker waits for work before it exits.
IDLE_EXIT = 5.0
_log = logging.getLogger(__name__)


class Dispatcher(Generic[Job]):
    """Runs ``handler(job, client)`` for each job once it is due, on up to N threads.

    Args:
        handler: Performs one job; returns a follow-up (a retry) or ``None``. An exception
            is logged and ends that job: one broken delivery must not stop the others.
        name: Prefix of the worker threads' names.
    """

    def __init__(
        self, handler: Callable[[Job, httpx.Client], FollowUp[Job] | None], *, name: str
    ) -> None:
        self._handler = handler
        self._name = name
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Job]] = []
        self._order = itertools.count()
        self._in_flight = 0
        self._generation = 0
        self._workers: set[int] = set()
        self._concurrency = 1

    def submit(self, job: Job, delay: float, concurrency: int) -> None:
        """Queue ``job`` to run ``delay`` seconds from now, on at most ``concurrency`` workers."""
        with self._cond:
            self._concurrency = concurrency
            heapq.heappush(self._queue, (time.monotonic() + delay, next(self._order), job))
            self._start_workers()
            self._cond.notify_all()

    def clear(self) -> None:
        """Drop queued jobs and forget in-flight ones (their follow-ups are discarded)."""
        with self._cond:
            self._queue.clear()
            self._in_flight = 0
            self._generation += 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is queued or in flight; ``False`` if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(self._idle, timeout)

    def pending(self) -> int:
        """Jobs queued or in flight."""
        with self._cond:
            return len(self._queue) + self._in_flight

    def _idle(self) -> bool:
        return not self._queue and self._in_flight == 0

    def _start_workers(self) -> None:
        for index in range(self._concurrency):
            if index not in self._workers:
                self._workers.add(index)
                name = f"{self._name}-{index}"
                threading.Thread(target=self._work, args=(index,), name=name, daemon=True).start()

    def _work(self, index: int) -> None:
        with new_client() as client:
            while (taken := self._take(index)) is not None:
                generation, job = taken
                try:
                    follow = self._handler(job, client)
                except Exception:  # a bug in one delivery must not kill the worker
                    _log.exception("webhook delivery failed unexpectedly")
                    follow = None
                self._done(generation, follow)

    def _take(self, index: int) -> tuple[int, Job] | None:
        """The next due job, or ``None`` when this worker should exit."""
        with self._cond:
            idle_since = time.monotonic()
            while True:
                now = time.monotonic()
                if index >= self._concurrency or (
                    not self._queue and now - idle_since >= IDLE_EXIT
                ):
                    self._workers.discard(index)
                    return None
                if self._queue and self._queue[0][0] <= now:
                    job = heapq.heappop(self._queue)[2]
                    self._in_flight += 1
                    return self._generation, job
                due = self._queue[0][0] - now if self._queue else IDLE_EXIT
                self._cond.wait(min(due, IDLE_EXIT))

    def _done(self, generation: int, follow: FollowUp[Job] | None) -> None:
        with self._cond:
            if generation != self._generation:  # cleared meanwhile: forget it
                return
            self._in_flight -= 1
            if follow is not None:
                delay, job = follow
                heapq.heappush(self._queue, (time.monotonic() + delay, next(self._order), job))
            self._cond.notify_all()
