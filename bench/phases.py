"""The phases that are not S x K workloads: idle polling, half of peak load, polled and pushed."""

from __future__ import annotations

import bisect
import math
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench.config import Workload
from bench.emu import (
    Emulator,
    Seeded,
    latencies,
    pending_times,
    pushed_times,
    session_body,
)
from bench.figures import BUSIEST_WINDOW, SPLIT
from bench.measure import Window, percentiles, tree_cpu
from bench.stack import API_KEY, WEBHOOK_SECRET, BenchStack
from dispatcher.client import AgentsClient

IDLE_PASSES = 3
#: Passes an hour of the safety-net poll that runs beside the webhook intake (every 60 s).
SAFETY_NET_PASSES_PER_HOUR = 3600 / 60


def run_idle(stack: BenchStack, emu: Emulator, count: int) -> dict[str, Any]:
    """``count`` sessions with nothing pending, polled by an in-process ``Poller``.

    In-process, so ``time.process_time`` measures exactly the pass (listing, parsing,
    deciding) with no interpreter start-up. The first of :data:`IDLE_PASSES` passes pays
    for warm-up (connections, first validations); the median is the figure.
    """
    from dispatcher.poll import Poller
    from dispatcher.sources.agents import SOURCE
    from tasks.runtime import get_ledger
    from tasks.settings import get_settings

    emu.reset()
    emu.seed([{}] * count)
    cpu, wall, lists, seen = [], [], [], []
    window = Window(stack.redis(), [])
    with AgentsClient(api_key=API_KEY, base_url=f"{stack.origin}/v1") as client:
        poller = Poller(client, get_ledger(SOURCE.name), get_settings())
        for _ in range(IDLE_PASSES):
            since, started, cpu0 = time.time(), time.perf_counter(), time.process_time()
            summary = poller.poll_once()
            cpu.append(time.process_time() - cpu0)
            wall.append(time.perf_counter() - started)
            lists.append(emu.list_requests(since))
            seen.append(summary.sessions_seen)
    commands = window.close().total_commands
    return {
        "sessions": count,
        "passes": IDLE_PASSES,
        "sessions_seen": seen,
        "list_requests": lists,
        "cpu_seconds": cpu,
        "cpu_seconds_median": statistics.median(cpu),
        "wall_seconds": wall,
        "redis_commands": commands,
        "per_session_per_hour_with_webhooks": _steady_cost(count, lists, cpu, commands),
    }


def _steady_cost(count: int, lists: list[int], cpu: list[float], commands: int) -> dict[str, float]:
    """What one idle session costs an hour with webhooks on and the 60 s safety-net poll.

    Idle sessions are never pushed (only a session that starts waiting is), so their whole
    cost is their share of the safety-net passes: list requests, poller CPU, Redis commands.
    """
    share = SAFETY_NET_PASSES_PER_HOUR / count  # one session's part of an hour's passes
    return {
        "list_requests": statistics.median(lists) * share,
        "poller_cpu_seconds": statistics.median(cpu) * share,
        "redis_commands": commands / IDLE_PASSES * share,
        "webhook_deliveries": 0.0,
    }


def arrivals(rate: float, duration: float, seed: int) -> list[float]:
    """Poisson arrival offsets (seconds) at ``rate`` per second over ``duration``."""
    rng = random.Random(seed)  # noqa: S311 - a load shape, not cryptography
    offsets, t = [], rng.expovariate(rate)
    while t < duration:
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


def busiest(offsets: list[float], window: float = BUSIEST_WINDOW) -> float:
    """The most arrivals per second in any ``window`` seconds of ``offsets`` (sorted).

    A Poisson run keeps its rate on average only: ten seconds of a 15 s run may run a tenth
    above it, and on a path near its capacity that alone builds a queue, so each run
    reports how hard its busiest stretch pushed.

    Raises:
        ValueError: ``window`` is not a positive number of seconds.
    """
    if not window > 0:
        raise ValueError(f"the window must be positive seconds, not {window!r}")
    most, start = 0, 0
    for end, t in enumerate(offsets):
        while t - offsets[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most / window


def _busiest(offsets: list[float], seconds: float, calls: int) -> dict[str, float]:
    """A latency run's busiest stretch of arrivals: its window and its calls per second."""
    window = min(BUSIEST_WINDOW, seconds) if seconds > 0 else BUSIEST_WINDOW
    return {"busiest_window_s": window, "busiest_calls_per_s": busiest(offsets, window) * calls}


def repeated(run: Callable[[int], dict[str, Any]], reps: int) -> dict[str, Any]:
    """A latency phase run ``reps`` times: the run of median p95, with every run's p95.

    One 15 s run's p95 rests on its slowest few dozen sessions, so a busy second of the
    machine moves it far; the median of the repetitions (each with its own arrivals) and
    their spread say what the path does and how much the machine moved it. Each run's
    busiest stretch of arrivals is kept beside its p95: the load moves it too.
    """
    runs = [run(rep) for rep in range(max(reps, 1))]
    ranked = sorted(runs, key=_p95)
    middle = dict(ranked[(len(ranked) - 1) // 2])
    middle["repetitions"] = len(runs)
    middle["p95_per_repetition"] = [r["latency"]["p95"] for r in runs]
    middle["busiest_calls_per_s_per_repetition"] = [r["busiest_calls_per_s"] for r in runs]
    return middle


def _p95(run: dict[str, Any]) -> float:
    """A run's p95 for ranking (a run with no answers ranks last)."""
    p95 = float(run["latency"]["p95"])
    return math.inf if math.isnan(p95) else p95


def run_half_load(
    stack: BenchStack, emu: Emulator, workload: Workload, peak_calls_per_s: float, rep: int = 0
) -> dict[str, Any]:
    """Open loop: sessions arrive at half the peak rate whatever the answers do.

    Sessions arrive as a Poisson process (seeded by ``--seed`` plus the repetition), one
    seed request per tick with every session then due, so time-to-answer includes the wait
    for the next poll.
    """
    config = stack.config
    rate = max(peak_calls_per_s / 2 / workload.calls, 0.5)
    offsets = arrivals(rate, config.half_load_seconds, config.seed + rep) or [0.0]
    emu.reset()
    cpu = ServicesCpu(stack)
    seeded = _seed_on_schedule(emu, workload, offsets)
    batches = emu.wait_batches(len(offsets), config.timeout)
    target = config.poll_interval + 0.25
    latency = percentiles(latencies(batches, pending_times(seeded)))
    return {
        "peak_calls_per_s": peak_calls_per_s,
        "rate_calls_per_s": rate * workload.calls,
        "rate_sessions_per_s": rate,
        **_busiest(offsets, config.half_load_seconds, workload.calls),
        "seconds": config.half_load_seconds,
        "sessions": len(offsets),
        "batches": len(batches),
        "latency": latency,
        "target_p95": target,
        **_cpu_figures(cpu, len(offsets) * workload.calls),
    }


#: Seconds from a push's delivery to its accepted batch, at most, at half of peak load, for
#: no-op tools (a tool's own time adds to it).
PUSH_TARGET_P95 = 0.150


def run_push_load(
    stack: BenchStack,
    emu: Emulator,
    workload: Workload,
    load: tuple[float, str],
    rep: int = 0,
) -> dict[str, Any]:
    """The half-load run again, with sessions pushed to the webhook intake.

    ``load`` is the peak (calls/s) to take half of, and the intake's URL. The fast poller
    is gone: only pushes (and a 60 s safety-net poll) find the sessions. Latency runs from
    the emulator's delivery of each push to its batch's acceptance.
    """
    config = stack.config
    peak_calls_per_s, intake = load
    rate = max(peak_calls_per_s / 2 / workload.calls, 0.5)
    offsets = arrivals(rate, config.half_load_seconds, config.seed + rep) or [0.0]
    emu.reset()
    emu.register_webhook(intake, WEBHOOK_SECRET)
    cpu = ServicesCpu(stack)
    seeded = _seed_on_schedule(emu, workload, offsets)
    batches = emu.wait_batches(len(offsets), config.timeout)
    pushed, retrieved = pushed_times(emu.deliveries()), emu.retrieved_times()
    from_push = [
        b["received_at"] - pushed[b["session_id"]] for b in batches if b["session_id"] in pushed
    ]
    both = [b for b in batches if b["session_id"] in pushed and b["session_id"] in retrieved]
    return {
        "rate_calls_per_s": rate * workload.calls,
        **_busiest(offsets, config.half_load_seconds, workload.calls),
        "seconds": config.half_load_seconds,
        "sessions": len(offsets),
        "batches": len(batches),
        "pushed": len(pushed),
        "latency": percentiles(from_push),
        # The push path's own part (intake, toolfan.poll queue, the push task's start), and
        # the engine's (claim, chord, calls, submission): where a slow p95 comes from.
        "push_to_retrieve": percentiles(
            [retrieved[b["session_id"]] - pushed[b["session_id"]] for b in both]
        ),
        "retrieve_to_accepted": percentiles(
            [b["received_at"] - retrieved[b["session_id"]] for b in both]
        ),
        "seed_to_answer": percentiles(latencies(batches, pending_times(seeded))),
        "target_p95": PUSH_TARGET_P95,
        **_cpu_figures(cpu, len(offsets) * workload.calls),
    }


def _cpu_figures(cpu: ServicesCpu, calls: int) -> dict[str, dict[str, float]]:
    """A phase's CPU per call: the totals, and every role's share."""
    by_role = cpu.per_call(calls)
    return {"cpu_ms_per_call": cpu_totals(by_role), SPLIT: by_role}


def run_push_peak(stack: BenchStack, emu: Emulator, workload: Workload, intake: str) -> float:
    """Pushed peak throughput (calls/s): the workload's sessions all at once, pushed.

    Pushing costs more per call than polling (a signed delivery, a task and a retrieve per
    session), so its peak is its own; the half-load run at half of it is reported beside
    the one at half of the polled peak. Counts from the first delivery to the last batch.
    """
    emu.reset()
    emu.register_webhook(intake, WEBHOOK_SECRET)
    _seed_on_schedule(emu, workload, [0.0] * workload.sessions)
    batches = emu.wait_batches(workload.sessions, stack.config.timeout)
    pushed = pushed_times(emu.deliveries())
    first = min(pushed.values(), default=0.0)
    last = max((b["received_at"] for b in batches), default=first)
    return workload.sessions * workload.calls / max(last - first, 1e-3)


class ServicesCpu:
    """CPU of every service the bench started (its child processes), by role, from now on.

    The half-load runs compare polling and pushing at one rate: what each costs per call,
    all of toolfan's processes together, says how near that rate is to each one's
    saturation of the machine's cores; the split by role (workers, poller, intake, push
    worker...) says where a push costs more than a poll. The API stand-in's work and a
    private Redis's are the cores' too, but not toolfan's: they are counted apart.
    """

    def __init__(self, stack: BenchStack) -> None:
        self.roles = dict(stack.roles)
        self.pids = [c.pid for c in psutil.Process().children()]
        self.start = self._by_role()

    def _by_role(self) -> dict[str, float]:
        seconds: dict[str, float] = {}
        for pid in self.pids:
            role = self.roles.get(pid) or _untracked_role(pid)
            seconds[role] = seconds.get(role, 0.0) + tree_cpu([pid])
        return seconds

    def per_call(self, calls: int) -> dict[str, float]:
        """Milliseconds of CPU per call so far, by role (``api``: the API stand-in)."""
        now = self._by_role()
        return {role: (now[role] - self.start.get(role, 0.0)) * 1000 / calls for role in now}


#: Roles whose CPU is not toolfan's: the API stand-in's answers and a private Redis.
NOT_TOOLFAN = ("api", "redis")


def cpu_totals(by_role: dict[str, float]) -> dict[str, float]:
    """The CPU per call of toolfan (every role but the API and Redis), of the API, of Redis."""
    ours = sum(ms for role, ms in by_role.items() if role not in NOT_TOOLFAN)
    return {
        "toolfan": ours,
        "emulator": by_role.get("api", 0.0),
        "redis": by_role.get("redis", 0.0),
    }


def _untracked_role(pid: int) -> str:
    """The role of a child the stack did not start as a service: a private Redis, or other."""
    try:
        name = psutil.Process(pid).name()
    except psutil.NoSuchProcess:
        return "other"
    return "redis" if name.startswith("redis-server") else "other"


def _seed_on_schedule(emu: Emulator, workload: Workload, offsets: list[float]) -> list[Seeded]:
    """Seed each session at its offset; those already due go in one request."""
    body, seeded, start, i = session_body(workload), [], time.monotonic(), 0
    while i < len(offsets):
        delay = start + offsets[i] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.monotonic() - start
        due = max(bisect.bisect_right(offsets, now) - i, 1)
        seeded += emu.seed([body] * due)
        i += due
    return seeded
