"""Log lines about events a client decides the number of, at most one a minute.

A client can open connections and send bodies as fast as it likes: a line for each of its
refusals would let it write the intake's log. The counters in ``/metrics`` count each one;
the log gets a line when one is due, with the number since the last.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds between two lines of one kind.
LOG_EVERY = 60.0


class Throttle:
    """Counts events; says when a line is due, and how many it stands for."""

    def __init__(
        self, every: float = LOG_EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._every = every
        self._clock = clock
        self._logged = clock() - every
        self._since = 0

    def due(self) -> int | None:
        """Count one event: the number since the last line if a line is due now, else None."""
        self._since += 1
        now = self._clock()
        if now - self._logged < self._every:
            return None
        count, self._logged, self._since = self._since, now, 0
        return count
