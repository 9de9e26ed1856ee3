"""Worker process hooks: JSON logs, the metrics endpoint, and recycling of pool processes.

A prefork pool process runs its calls on its own thread under a timer
(:mod:`handlers.alarm`); one that would not stop is answered by the watchdog, which then
ends the process (:mod:`tasks.overrun`). A call run on a runner thread there (a coroutine's
event loop) that overran and would not stop (see :mod:`handlers.threads`) keeps a thread
burning a core for as long as the process lives. So such a process is recycled once it has
answered: it leaves before taking its next task, and the pool starts a fresh one (the same
way ``worker_max_memory_per_child`` recycles a process grown past
``TOOLFAN_MAX_MEMORY_PER_CHILD``). On thread pools nothing can be recycled; the stuck calls
are counted in ``toolfan_stuck_calls`` and logged.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import redis
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    task_postrun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from handlers.alarm import ALARM
from handlers.threads import RUNNERS
from tasks import liveness, metrics
from tasks.logs import quiet_celery_per_task_lines, structured
from tasks.overrun import answer_and_leave
from tasks.settings import get_settings

log = logging.getLogger("toolfan.worker")

#: Set in a pool process that should leave before its next task.
RECYCLE = threading.Event()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _structured_logs(logger: logging.Logger, **kwargs: Any) -> None:
    structured(logger, get_settings().max_log_chars)
    quiet_celery_per_task_lines()


@worker_init.connect
def _serve_metrics(**kwargs: Any) -> None:
    port = metrics.port_from_env()
    if port is None:
        return
    try:
        metrics.serve(port)
    except OSError as exc:
        # Celery swallows a worker_init receiver's error before logging is set up, so a
        # port already taken would leave the worker without its endpoint and no word of it.
        print(
            f"toolfan: error: no metrics endpoint: TOOLFAN_METRICS_PORT={port}: {exc}",
            file=sys.stderr,
            flush=True,
        )


_HEART: list[liveness.Heart] = []


@worker_ready.connect
def _start_heart(sender: Any = None, **kwargs: Any) -> None:
    """Beat (and reap) from the worker's main process, once it consumes."""
    from tasks.app import app

    settings = get_settings()
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    name = liveness.identity(getattr(sender, "hostname", "") or "", os.getpid())
    beat = liveness.Beat(client, name, settings.heartbeat, settings.dead_after)
    reaper = liveness.Reaper(
        client, app.connection_for_write(), settings.dead_after, settings.heartbeat
    )
    heart = liveness.Heart(beat, reaper, sender)
    heart.start()
    _HEART.append(heart)
    log.info("heartbeat every %gs as %s", settings.heartbeat, name)


@worker_shutdown.connect
def _stop_heart(**kwargs: Any) -> None:
    while _HEART:
        _HEART.pop().stop()


@worker_process_init.connect
def _recycle_when_stuck(**kwargs: Any) -> None:
    """In a prefork pool process: calls on its own thread, and recycling once one got stuck."""
    liveness.MAIN_PID = os.getppid()
    ALARM.enable(answer_and_leave)
    RECYCLE.clear()
    RUNNERS.on_stuck = _stuck
    worker = _pool_worker()
    if worker is None:
        return
    receive: Callable[..., Any] = worker.wait_for_job

    def wait_for_job(*args: Any, **kw: Any) -> Any:
        if RECYCLE.is_set():
            log.warning("recycling this pool process: a call that overran would not stop")
            raise SystemExit(0)
        return receive(*args, **kw)

    worker.wait_for_job = wait_for_job


def _pool_worker() -> Any:
    """Billiard's worker object of this pool process (the target it runs), if there is one.

    It is read here, during the pool initializer, before its task loop starts: the loop
    keeps the job-receiving function it finds then, which is where a recycle can start.
    """
    try:
        from billiard.process import current_process
    except ImportError:  # pragma: no cover - billiard comes with Celery
        return None
    target = getattr(current_process(), "_target", None)
    return target if hasattr(target, "wait_for_job") else None


def _stuck() -> None:
    RECYCLE.set()
    metrics.STUCK_CALLS.set(RUNNERS.stuck())


@task_postrun.connect
def _report_stuck(**kwargs: Any) -> None:
    """Keep the stuck-calls gauge current on every pool (threads and gevent too)."""
    if RUNNERS.on_stuck is None:
        RUNNERS.on_stuck = lambda: log.warning(
            "a call that overran its timeout would not stop (%d such calls in this process)",
            RUNNERS.stuck(),
        )
    metrics.STUCK_CALLS.set(RUNNERS.stuck())


@worker_process_shutdown.connect
def _forget_child(pid: int | None = None, **kwargs: Any) -> None:
    metrics.process_exited(pid or os.getpid())
