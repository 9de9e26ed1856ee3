"""``python -m bench anatomy --threads N``: execute's parts weighed as a threads pool runs them.

The I/O workload runs on a threads pool: one process, N threads, one interpreter lock.
There a call's cost is not what it is alone: every wait of a call (a Redis round trip, the
runner thread's handoff, a write) hands the lock to another thread and takes it back
later, a switch the single-threaded anatomy never pays. So this weighs each part of
``execute`` again with N threads calling it at once, as ``toolfan worker -P threads -c N``
would: CPU per call of the whole process over windows of ``--threads-seconds``, with the
part against without it, in pairs of windows whose order alternates (the median of the
pairs' differences).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

#: Turns one part of ``execute`` on (True) or off (False) in this process.
Switch = Callable[[bool], None]
T = TypeVar("T")

#: Seconds the callers run after a start or a switch before a window is measured.
SETTLE = 0.5


@dataclass(frozen=True)
class ThreadsConfig:
    """How the parts are weighed with many threads calling at once."""

    threads: int = 64
    #: Seconds of one window (CPU per call over it).
    seconds: float = 2.0
    #: Pairs of windows, with and without a part.
    pairs: int = 6
    #: Windows of the whole body alone.
    windows: int = 3


class Callers:
    """``threads`` threads calling ``fn`` in a loop until closed; each counts its own calls.

    Each thread keeps its own count (a shared ``+=`` from many threads loses increments).
    A call that raises stops its thread and is kept, so a window never reports calls that
    did not happen: :meth:`window` raises it.
    """

    def __init__(self, fn: Callable[[], object], threads: int) -> None:
        self._fn = fn
        self._counts = [0] * threads
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"anatomy-{i}", daemon=True)
            for i in range(threads)
        ]

    def __enter__(self) -> Callers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _loop(self, index: int) -> None:
        try:
            while not self._stop.is_set():
                self._fn()
                self._counts[index] += 1
        except BaseException as exc:  # kept for the window to raise
            self.errors.append(exc)

    def calls(self) -> int:
        """Calls completed so far, by every thread."""
        return sum(self._counts)

    def window(self, seconds: float) -> tuple[float, float]:
        """CPU microseconds per call of the whole process, and calls/s, over ``seconds``.

        Raises:
            RuntimeError: a call raised, or no call completed in the window.
        """
        cpu, calls, wall = time.process_time(), self.calls(), time.perf_counter()
        time.sleep(seconds)
        cpu, calls = time.process_time() - cpu, self.calls() - calls
        wall = time.perf_counter() - wall
        if self.errors:
            raise RuntimeError(f"a call raised: {self.errors[0]!r}") from self.errors[0]
        if calls == 0:
            raise RuntimeError(f"no call completed in {seconds:g} s")
        return cpu / calls * 1e6, calls / wall


def alternating(switch: Switch, side: Callable[[], T], pairs: int) -> tuple[list[T], list[T]]:
    """``side`` measured with a part and without it, in ``pairs`` pairs; (with, without).

    The order within a pair flips each time, so a machine that speeds up or slows down
    weighs on both sides alike; the part is always switched back on.
    """
    kept: list[T] = []
    dropped: list[T] = []
    try:
        for pair in range(pairs):
            for on in (True, False) if pair % 2 else (False, True):
                switch(on)
                (kept if on else dropped).append(side())
    finally:
        switch(True)
    return kept, dropped


def weigh(callers: Callers, switch: Switch, config: ThreadsConfig) -> dict[str, Any]:
    """One part with the threads calling: windows with against without it, in pairs."""

    def window() -> tuple[float, float]:
        time.sleep(SETTLE)
        return callers.window(config.seconds)

    kept, dropped = alternating(switch, window, config.pairs)
    return {
        "us": statistics.median(k[0] - d[0] for k, d in zip(kept, dropped, strict=True)),
        "with": [us for us, _ in kept],
        "without": [us for us, _ in dropped],
        "calls_per_s_without_vs_with": statistics.median(
            d[1] / k[1] for k, d in zip(kept, dropped, strict=True)
        ),
    }


def measure_threads(
    call: Callable[[], object],
    off: dict[str, Switch],
    parts: list[str],
    config: ThreadsConfig,
) -> dict[str, Any]:
    """The body's CPU per call with ``config.threads`` callers, and each part's inside it."""
    call()  # the first call loads what threads would otherwise race to load
    with Callers(call, config.threads) as callers:
        time.sleep(SETTLE)
        windows = [callers.window(config.seconds) for _ in range(config.windows)]
        weighed = {name: weigh(callers, off[name], config) for name in parts}
    body = [us for us, _ in windows]
    return {
        "threads": config.threads,
        "seconds": config.seconds,
        "pairs": config.pairs,
        "body_us": statistics.median(body),
        "body_rounds": body,
        "calls_per_s": statistics.median(rate for _, rate in windows),
        "parts": weighed,
    }
