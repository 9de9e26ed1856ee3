"""What a run costs: CPU of process trees, Redis commands, and latency percentiles.

Every figure is a delta taken around one phase only, so start-up costs (imports, worker
boot, connection set-up) never land in a per-call number.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psutil
import redis

#: Commands the bench itself sends to read the counters; never part of a measurement.
_OWN_COMMANDS = frozenset({"info", "client|list"})


def machine() -> dict[str, Any]:
    """When and on what a run measured: the figures mean little without the machine's load."""
    return {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def cpu_ticks() -> tuple[int, int] | None:
    """Ticks stolen by the hypervisor and all ticks, of every CPU, or None off Linux.

    On a virtual machine, another guest's load takes the cores from under a run without
    showing in its own load average: the stolen share says how much of a run's spread
    came from outside it.
    """
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(f) for f in fields[1:9]]  # user .. steal; guest time is inside user
    return ticks[7], sum(ticks)


def stolen_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    """The share of CPU time stolen between two :func:`cpu_ticks` readings."""
    if start is None or end is None or end[1] <= start[1]:
        return None
    return (end[0] - start[0]) / (end[1] - start[1])


def tree_cpu(pids: Iterable[int]) -> float:
    """User + system CPU seconds of these processes, their live descendants and reaped ones.

    A prefork worker's pool processes do the work, so the main process alone says little.
    """
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in procs:
            total += _own_cpu(proc)
        total += _reaped_cpu(root)
    return total


def control_workers(pids: Iterable[int]) -> list[int]:
    """The control workers these workers started (``toolfan worker`` starts one each).

    Its threads deliver the batches (``toolfan.submit``): apart from the pool processes
    that run the calls, the split shows what a delivery costs.
    """
    found = []
    for pid in pids:
        try:
            children = psutil.Process(pid).children()
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                if "tasks.control_worker" in child.cmdline():
                    found.append(child.pid)
            except psutil.NoSuchProcess:
                continue
    return found


def own_cpu(pids: Iterable[int]) -> float:
    """User + system CPU seconds of these processes alone, without their children."""
    total = 0.0
    for pid in pids:
        try:
            total += _own_cpu(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return total


class CpuSplit:
    """A phase's CPU by process: the workers' main processes, pools, control workers, others.

    A prefork worker's main process takes every message from the broker, hands it to a
    pool process and acks it; the split shows how much of a call's CPU that costs beside
    the pool's own work, and the API stand-in's share, which shares the cores.

    Args:
        workers: The worker processes (their pools are their children).
        named: Other processes by name (``poller``, ``api``), each with its children.
    """

    def __init__(self, workers: Sequence[int], named: Mapping[str, int]) -> None:
        self.workers = list(workers)
        self.named = dict(named)
        self.before = self._now()

    def _now(self) -> dict[str, float]:
        main = own_cpu(self.workers)
        control = tree_cpu(control_workers(self.workers))
        now = {
            "worker main": main,
            "worker pool": tree_cpu(self.workers) - main - control,
            "control worker": control,
        }
        now.update({name: tree_cpu([pid]) for name, pid in self.named.items()})
        return now

    def per_call(self, calls: int) -> dict[str, float]:
        """Milliseconds of CPU per call of each part since the split began."""
        after = self._now()
        return {name: 1000 * (after[name] - self.before[name]) / calls for name in after}


def _own_cpu(proc: psutil.Process) -> float:
    return _cpu(proc, "user", "system")


def _reaped_cpu(proc: psutil.Process) -> float:
    return _cpu(proc, "children_user", "children_system")


def _cpu(proc: psutil.Process, *fields: str) -> float:
    """Sum of the named ``cpu_times`` fields; 0 for a process that is gone."""
    try:
        times = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(sum(getattr(times, name) for name in fields))


def command_counts(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the server started (``INFO commandstats``), ours excluded."""
    stats: Mapping[str, Any] = client.info("commandstats")
    counts: dict[str, int] = {}
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        if name not in _OWN_COMMANDS:
            counts[name] = int(value["calls"])
    return counts


def command_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Commands sent between two snapshots, by name (non-zero only)."""
    names = set(before) | set(after)
    delta = {n: after.get(n, 0) - before.get(n, 0) for n in names}
    return {n: d for n, d in sorted(delta.items(), key=lambda kv: -kv[1]) if d}


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95 and p99 (inclusive method: no value beyond the largest observed)."""
    if not values:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan}
    if len(values) == 1:
        return {"p50": values[0], "p95": values[0], "p99": values[0]}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98]}


@dataclass
class Window:
    """CPU and Redis counters at the start of a phase; :meth:`close` gives the deltas.

    Args:
        client: A Redis client of the server under test (any database).
        pids: The processes whose CPU counts (worker, poller).
    """

    client: redis.Redis
    pids: list[int]
    started: float = field(default_factory=time.time)
    cpu_before: float = 0.0
    commands_before: dict[str, int] = field(default_factory=dict)
    process_before: float = field(default_factory=time.process_time)

    def __post_init__(self) -> None:
        self.cpu_before = tree_cpu(self.pids)
        self.commands_before = command_counts(self.client)

    def close(self) -> Closed:
        """The deltas since the window opened."""
        commands = command_delta(self.commands_before, command_counts(self.client))
        return Closed(
            cpu=tree_cpu(self.pids) - self.cpu_before,
            bench_cpu=time.process_time() - self.process_before,
            commands=commands,
            elapsed=time.time() - self.started,
        )


@dataclass(frozen=True)
class Closed:
    """One phase's CPU seconds (stack and bench process), Redis commands and wall time."""

    cpu: float
    bench_cpu: float
    commands: dict[str, int]
    elapsed: float

    @property
    def total_commands(self) -> int:
        """Every command the server ran in the window (other than the bench's own reads)."""
        return sum(self.commands.values())


def foreign_clients(client: redis.Redis, own_dbs: Iterable[int], within: float) -> int:
    """Clients on other databases active in the last ``within`` seconds.

    ``INFO commandstats`` counts the whole server: when the test suite or another run is
    busy on the same Redis, its commands land in our delta, and the report says so.
    """
    dbs = set(own_dbs)
    listed: list[dict[str, Any]] = client.client_list()
    return sum(1 for c in listed if int(c["db"]) not in dbs and int(c["idle"]) <= within)
