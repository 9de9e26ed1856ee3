"""One system's figures on one workload: the unit the table, the JSON and the plot share."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

TOOLFAN = "toolfan"
#: toolfan on the run-shaped ``assistants`` source (the no-op workload's runs).
ASSISTANTS = "assistants"
RAW = "raw_celery"
#: Raw Celery's chords whose tasks also write toolfan's ledger (begin and finish per call).
RAW_LEDGER = "raw_ledger"
#: The least the contract asks: a list pass, one ledger write per call, one POST per batch.
FLOOR = "floor"
#: The same least on the run-shaped protocol: a read per run, a write per call, a submit per run.
RUNS_FLOOR = "runs_floor"
LOOP = "loop"
THREADS = "threads"
#: Display names, in table and plot order.
SYSTEMS = {
    TOOLFAN: "toolfan",
    ASSISTANTS: "toolfan runs",
    RAW: "raw Celery",
    RAW_LEDGER: "raw + ledger",
    FLOOR: "the floor",
    RUNS_FLOOR: "the runs floor",
    THREADS: "thread pool",
    LOOP: "sequential loop",
}
#: The key of a measurement's CPU per call by process (:class:`bench.measure.CpuSplit`).
SPLIT = "cpu_ms_per_call_by_process"
#: Seconds of the window in which a latency run's busiest arrivals are counted.
BUSIEST_WINDOW = 5.0


@dataclass
class Measurement:
    """What one system did with one workload.

    ``seconds`` is the span the throughput is computed over: from the sessions becoming
    pending (toolfan), the first publish (raw Celery) or the first list request (in-process
    loops), to the last batch accepted or chord finished. ``None`` marks a figure that does
    not apply (an in-process loop sends no Redis commands and makes no polls).
    """

    system: str
    workload: str
    sessions: int
    calls: int
    seconds: float
    latency: dict[str, float]
    redis_commands_per_call: float | None
    cpu_seconds_per_call: float | None
    api_requests_per_poll: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def calls_per_s(self) -> float:
        """Calls answered per second."""
        return self.calls / self.seconds if self.seconds > 0 else math.nan

    @property
    def sessions_per_s(self) -> float:
        """Sessions answered per second."""
        return self.sessions / self.seconds if self.seconds > 0 else math.nan

    def to_json(self) -> dict[str, Any]:
        """Every field plus the two rates."""
        return {
            **asdict(self),
            "calls_per_s": self.calls_per_s,
            "sessions_per_s": self.sessions_per_s,
        }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or ``None`` when either is missing or zero."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator
