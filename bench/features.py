"""What policies and approvals cost: nothing when unused, a measured amount per call in use.

Unused, the engine's whole cost of the two features is one check in ``execute``: the tool
has no ``authorize=``, ``TOOLFAN_POLICY`` is unset, and the tool needs no approval. That
check is timed in-process and set against the run-to-run spread of the no-op rows. In use,
the same no-op sessions run on the same workers through a tool with an allow-all policy,
and through one needing approval (a bench thread approves each call as it is asked), and
each one's CPU and Redis commands per call are set against plain no-op runs taken in
between, so the difference is read against the spread of those very runs.
"""

from __future__ import annotations

import statistics
import threading
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from bench.config import APPROVED_TOOL, POLICY_TOOL, Workload
from bench.emu import Emulator
from bench.engine import run_toolfan
from bench.figures import Measurement
from bench.stack import BenchStack
from dispatcher.devstack import Service

#: Timings of the unused check (each a mean over :data:`CHECK_NUMBER` runs).
CHECK_REPEAT, CHECK_NUMBER = 7, 20_000
#: Seconds between the approver's looks at the inbox.
APPROVE_EVERY = 0.05
#: Share of the no-op sessions run through the approval tool: each call waits at least
#: one approval poll (2 s), so a full-size run would mostly measure waiting.
APPROVAL_SHARE = 4


def unused_check_seconds() -> float:
    """Seconds per call of ``execute``'s policy and approval check for a tool using neither.

    The median of :data:`CHECK_REPEAT` timings, on the bench's no-op tool with the bench's
    settings (no ``TOOLFAN_POLICY``), in this process: the very code a worker runs.
    """
    from bench.config import NOOP_TOOL
    from handlers import CallContext
    from handlers.limits import DEFAULT_LIMITS
    from tasks.execute import _authorize
    from tasks.settings import load_registry

    tool = load_registry().get(NOOP_TOOL)
    if tool is None:
        raise RuntimeError(f"{NOOP_TOOL} is not registered (TOOLFAN_HANDLERS is not the bench's)")
    args = tool.parse({}, DEFAULT_LIMITS)
    call = CallContext(source="agents", batch_id="s", turn_id="t", call_id="c", function=NOOP_TOOL)
    if _authorize(tool, args, call, {}) is not None:
        raise RuntimeError(f"{NOOP_TOOL} has a policy or needs approval: the check is not unused")
    timer = timeit.Timer(lambda: _authorize(tool, args, call, {}))
    return statistics.median(timer.repeat(CHECK_REPEAT, CHECK_NUMBER)) / CHECK_NUMBER


def run_features(
    stack: BenchStack,
    emu: Emulator,
    workload: Workload,
    services: tuple[list[Service], Service],
    noop_rows: list[Measurement],
) -> dict[str, Any]:
    """The unused check against the spread, then each feature in use against plain runs.

    Args:
        stack: The running stack.
        emu: Its emulator's admin client.
        workload: The no-op workload (its workers and poller are running).
        services: Those workers and that poller.
        noop_rows: The no-op workload's toolfan repetitions (their spread is the yardstick).
    """
    reps = stack.config.reps
    check = unused_check_seconds()
    cpu = statistics.median(m.cpu_seconds_per_call or 0.0 for m in noop_rows)
    policy = replace(workload, tool=POLICY_TOOL)
    approval = replace(
        workload, tool=APPROVED_TOOL, sessions=max(workload.sessions // APPROVAL_SHARE, 1)
    )
    return {
        "unused": {
            "check_seconds_per_call": check,
            "cpu_seconds_per_call": cpu,
            "share_of_cpu_per_call": check / cpu if cpu else None,
            "throughput_spread": _spread([m.calls_per_s for m in noop_rows]),
        },
        "policy": _in_use(
            POLICY_TOOL,
            [lambda: run_toolfan(stack, emu, policy, services)] * reps,
            [lambda: run_toolfan(stack, emu, workload, services)] * reps,
        ),
        "approval": _with_approver(
            lambda: _in_use(
                APPROVED_TOOL,
                [lambda: run_toolfan(stack, emu, approval, services)],
                [lambda: run_toolfan(stack, emu, replace(approval, tool=workload.tool), services)],
            )
        ),
    }


def _in_use(
    tool: str, feature: list[Callable[[], Measurement]], plain: list[Callable[[], Measurement]]
) -> dict[str, Any]:
    """Feature and plain runs taken in turn; the feature's extra cost per call, medians."""
    used, bare = [], []
    for with_it, without in zip(feature, plain, strict=True):
        used.append(with_it())
        bare.append(without())
    return {
        "tool": tool,
        "calls": used[0].calls,
        "runs": len(used),
        "cpu_ms_per_call": _median_ms(used, "cpu_seconds_per_call"),
        "plain_cpu_ms_per_call": _median_ms(bare, "cpu_seconds_per_call"),
        "extra_cpu_ms_per_call": _median_ms(used, "cpu_seconds_per_call")
        - _median_ms(bare, "cpu_seconds_per_call"),
        "redis_commands_per_call": _median(used, "redis_commands_per_call"),
        "plain_redis_commands_per_call": _median(bare, "redis_commands_per_call"),
        "extra_redis_commands_per_call": _median(used, "redis_commands_per_call")
        - _median(bare, "redis_commands_per_call"),
        "calls_per_s": [m.calls_per_s for m in used],
        "plain_calls_per_s": [m.calls_per_s for m in bare],
        "plain_spread": _spread([m.calls_per_s for m in bare]),
        "latency_p50": statistics.median(m.latency["p50"] for m in used),
        "plain_latency_p50": statistics.median(m.latency["p50"] for m in bare),
        "failed_events": sum(m.extra.get("failed_events", 0) for m in used),
        "sessions_answered": [m.extra.get("sessions_answered") for m in used],
    }


def _median(rows: list[Measurement], name: str) -> float:
    return float(statistics.median(getattr(m, name) or 0.0 for m in rows))


def _median_ms(rows: list[Measurement], name: str) -> float:
    return _median(rows, name) * 1000


def _spread(values: list[float]) -> float | None:
    """(max - min) / median: how far repetitions of one thing differ."""
    middle = statistics.median(values) if values else 0.0
    return (max(values) - min(values)) / middle if middle else None


def _with_approver(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``measure`` while a thread approves every pending call as soon as it sees it."""
    with approver() as approved:
        result = measure()
    result["approved"] = approved[0]
    return result


@contextmanager
def approver() -> Iterator[list[int]]:
    """A thread approving every pending approval; yields a one-item list of its count."""
    from tasks.approvals import State
    from tasks.runtime import get_approvals

    store, stop, count = get_approvals(), threading.Event(), [0]

    def approve() -> None:
        while not stop.is_set():
            for pending in store.pending():
                count[0] += store.decide(pending.id, State.APPROVED, "bench").taken
            stop.wait(APPROVE_EVERY)

    thread = threading.Thread(target=approve, name="bench-approver", daemon=True)
    thread.start()
    try:
        yield count
    finally:
        stop.set()
        thread.join(timeout=10)
