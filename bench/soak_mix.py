"""The soak's three ways of driving the engine, offered together as one load.

Sessions (the ``agents`` source, found by the pollers), runs (the ``assistants`` source,
named with ``watch_runs``) and ``run_tool_calls`` batches (an application's own calls)
each arrive as a Poisson process at their share of the offered calls per second. They are
paused and resumed together: an epoch's drain waits for the broker to be idle, which no
source may keep busy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.soak_inline import InlineCaller
from bench.soak_load import Arrivals, Seeder
from bench.soak_runs import RunSeeder

#: The sources by their names in the soak's report.
SESSIONS, RUNS, INLINE = "sessions", "runs", "run_tool_calls"


@dataclass(frozen=True)
class Rates:
    """Calls per second offered by each source."""

    sessions: float
    runs: float
    inline: float

    @classmethod
    def split(cls, total: float, runs_share: float, inline_share: float) -> Rates:
        """``total`` calls/s shared out: runs and batches their shares, sessions the rest."""
        runs, inline = total * runs_share, total * inline_share
        return cls(total - runs - inline, runs, inline)

    def to_json(self) -> dict[str, float]:
        """Calls/s by source name."""
        return {SESSIONS: self.sessions, RUNS: self.runs, INLINE: self.inline}


class Mix:
    """The three sources' threads, started, paused, resumed and stopped together.

    Args:
        origin: The emulator's ``http://host:port``.
        rates: Calls/s of each source.
        seed: Seed of the sessions' arrivals; the runs' and batches' are the next two.
        timeout: ``run_tool_calls``'s timeout: below the ledger's TTL, or a batch that
            times out would find its calls' saved results already expired.
    """

    def __init__(self, origin: str, rates: Rates, seed: int, timeout: float) -> None:
        self.sessions = Seeder(origin, rates.sessions, seed)
        self.runs = RunSeeder(origin, rates.runs, seed + 1)
        self.inline = InlineCaller(rates.inline, seed + 2, timeout=timeout)

    @property
    def sources(self) -> tuple[Arrivals[Any, Any], ...]:
        """Every source's thread."""
        return self.sessions, self.runs, self.inline

    def _each(self, act: Callable[[Arrivals[Any, Any]], object]) -> None:
        for source in self.sources:
            act(source)

    def start(self) -> None:
        """Start the threads (paused)."""
        self._each(Arrivals.start)

    def resume(self) -> None:
        """Every source arrives again."""
        self._each(Arrivals.resume)

    def pause(self) -> None:
        """No source arrives; none has a request in flight (batches may still be waiting)."""
        self._each(Arrivals.pause)

    def stop(self) -> None:
        """End the threads (the callers finish their batches first)."""
        self._each(Arrivals.stop)

    def check(self) -> None:
        """Raise the first failure of a source's thread, if one failed."""
        for source in self.sources:
            if source.error is not None:
                raise source.error
