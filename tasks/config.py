"""Celery configuration built from the settings and the registry.

The choices here are what make at-least-once delivery safe to combine with the ledger:
late acks and re-queueing on a lost worker (so a crash means redelivery, never loss),
prefetch 1 (a long call never holds other calls hostage), and hard time limits well
below the Redis ``visibility_timeout`` (so a slow call is never redelivered while it is
still running).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from kombu import Exchange, Queue

from handlers.errors import RegistryError
from handlers.policy import load_policy
from handlers.registry import Registry
from tasks.queues import POLL_TASK, ControlQueue, Router, all_queues
from tasks.settings import Settings

#: One direct exchange for every toolfan queue; a queue's routing key is its name.
EXCHANGE = Exchange("toolfan", type="direct")


#: Connections a worker may open to a Redis broker at once (at least its concurrency).
BROKER_CONNECTIONS = 1000


#: Where cgroup v2 states a container's CPU quota: ``"<quota> <period>"`` or ``"max ..."``.
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
#: Where cgroup v1 states it: ``cpu.cfs_quota_us`` (``-1``: none) and ``cpu.cfs_period_us``.
CFS = Path("/sys/fs/cgroup/cpu")


def usable_cpus(cpu_max: Path = CPU_MAX, cfs: Path = CFS) -> int:
    """The CPUs this process may use: its affinity, cut to its container's quota if any.

    ``os.cpu_count()`` counts the host's cores, so a worker limited to one CPU on a large
    node would start a process per core of the node. The quota is read from cgroup v2,
    else from cgroup v1 (older container hosts); a part of a CPU counts as one.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(cpu_max, cfs)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def cgroup_quota(cpu_max: Path = CPU_MAX, cfs: Path = CFS) -> float | None:
    """The container's CPU quota in CPUs (cgroup v2, else v1), or None when it has none."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):  # no cgroup v2 here
        try:
            quota = (cfs / "cpu.cfs_quota_us").read_text().strip()
            period = (cfs / "cpu.cfs_period_us").read_text().strip()
        except OSError:  # no cgroup v1 CPU controller either
            return None
    try:
        cpus = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):  # "max" or "-1" (no quota), or garbage
        return None
    return cpus if cpus > 0 else None


def worker_concurrency(settings: Settings) -> int:
    """The pool size of a worker started without ``-c``: the setting, else twice the CPUs.

    A call spends much of its time waiting, not computing: on the ledger's round trips, on
    the API for its batch's delivery, on whatever its tool calls. With one prefork process
    per CPU (Celery's default) a core sits idle whenever its process waits; two
    per CPU keep the cores busy: on the bench's no-op workload, about a tenth more calls
    per second. CPU-bound tools gain nothing from it and may set ``-c`` to the CPU count.
    """
    return settings.worker_concurrency or 2 * usable_cpus()


def hard_limit(settings: Settings, timeout: float) -> float:
    """The hard time limit of a task whose tool times out after ``timeout`` seconds."""
    return timeout + settings.time_limit_grace


def ceiling(settings: Settings) -> float:
    """The largest hard limit allowed: half the visibility timeout."""
    return settings.visibility_timeout / 2


def check_limits(settings: Settings, registry: Registry) -> None:
    """Refuse tool timeouts that could outlive the broker's redelivery delay.

    Raises:
        RegistryError: naming the tool and the limit it breaks.
    """
    for tool in registry:
        if hard_limit(settings, tool.timeout) > ceiling(settings):
            raise RegistryError(
                f"tool {tool.name!r}: timeout {tool.timeout:g} s plus a grace of "
                f"{settings.time_limit_grace:g} s exceeds half of TOOLFAN_VISIBILITY_TIMEOUT "
                f"({settings.visibility_timeout} s); raise the latter or shorten the tool"
            )


def celery_config(settings: Settings, registry: Registry) -> dict[str, Any]:
    """The full Celery configuration mapping (a bad ``TOOLFAN_POLICY`` stops the start)."""
    check_limits(settings, registry)
    if settings.policy:
        load_policy(settings.policy)
    transport = {"visibility_timeout": settings.visibility_timeout}
    return {
        "broker_url": settings.broker,
        "result_backend": settings.redis_url,
        # With late acks every thread or greenlet acks its own message, each on a pooled
        # connection: the Redis transport's default cap of 10 made a gevent worker's acks
        # fail ("Couldn't ack") under load, leaving messages to the visibility timeout.
        "broker_transport_options": {**transport, "max_connections": BROKER_CONNECTIONS},
        "result_backend_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        # Keep running calls through a broker blip: their results land in the ledger, and a
        # redelivered message returns the saved result instead of running them again.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # A prefork pool process grown past this (KiB) is replaced once it has answered.
        "worker_max_memory_per_child": settings.max_memory_per_child * 1024 or None,
        "worker_concurrency": worker_concurrency(settings),
        "task_time_limit": ceiling(settings),
        # Flower lists every task from the worker's received/started/succeeded events, and
        # turns them on itself: it sends every worker `enable_events` every 5 s. Sent with
        # nobody listening they cost a prefork worker's main process half its time, and
        # took the push p95 at half load from 0.12 to 0.24 s; so off until Flower runs, or
        # from the start with TOOLFAN_TASK_EVENTS=1 (for another event consumer). The
        # publisher's "sent" event would add a PUBLISH per call on the poller for a state
        # (queued, not yet received) that the queue-length metrics and alerts cover.
        "worker_send_task_events": settings.task_events,
        "task_send_sent_event": False,
        "result_expires": settings.result_expires,
        "task_queues": [Queue(name, EXCHANGE, routing_key=name) for name in all_queues(registry)],
        "task_default_queue": ControlQueue.SUBMIT.value,
        "task_default_exchange": EXCHANGE.name,
        "task_default_routing_key": ControlQueue.SUBMIT.value,
        "task_routes": (Router(registry),),
        "beat_schedule": beat_schedule(settings),
    }


def beat_schedule(settings: Settings) -> dict[str, Any]:
    """One beat entry polling every ``poll_interval``; a poll not started in time expires.

    Expiring near the interval keeps a backlog of stale polls from piling up when the
    poll queue's worker is down: the next beat brings a fresh one anyway.
    """
    return {
        "toolfan-poll": {
            "task": POLL_TASK,
            "schedule": settings.poll_interval,
            "options": {"expires": settings.poll_interval * 0.9},
        }
    }
