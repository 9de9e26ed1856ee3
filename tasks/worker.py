"""``toolfan worker``: Celery workers on every function queue plus the control queues.

Without ``-Q`` or another pool, that is two workers: a prefork pool on the function queues
and a control worker of threads beside it (:mod:`tasks.control_worker` says why).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

from tasks.control_worker import ControlWorker, Split, option_value, plan
from tasks.queues import ControlQueue, all_queues
from tasks.settings import get_settings, load_registry

#: The shutdown signals the pool passes on to its control worker. Ctrl-C is not among
#: them: the terminal sends it to the whole process group, the control worker included.
_FORWARDED = {"SIGTERM": signal.SIGTERM, "SIGQUIT": signal.SIGQUIT}


def worker_argv(options: Sequence[str]) -> list[str]:
    """The ``celery worker`` argument list; ``-Q`` given by the user picks a subset."""
    argv = ["worker", *options]
    if not any(o in ("-Q", "--queues") or o.startswith(("-Q", "--queues=")) for o in options):
        argv += ["-Q", ",".join(all_queues(load_registry()))]
    if not any(o in ("-l", "--loglevel") or o.startswith(("-l", "--loglevel=")) for o in options):
        argv += ["--loglevel", "INFO"]
    return argv


def queues_option(options: Sequence[str]) -> list[str] | None:
    """The queues a ``-Q``/``--queues`` option names, or None without one."""
    value = option_value(options, ("-Q", "--queues"))
    return None if value is None else value.split(",")


def serves_control_queues(options: Sequence[str]) -> bool:
    """Whether the worker consumes ``toolfan.submit`` or ``toolfan.poll`` (the API's users)."""
    queues = queues_option(options)
    return queues is None or any(q.strip() in set(ControlQueue) for q in queues)


def split_plan(options: Sequence[str]) -> Split | None:
    """How a ``toolfan worker OPTIONS`` splits into a pool and a control worker, if it does."""
    control = [q.value for q in ControlQueue]
    functions = [q for q in dict.fromkeys(load_registry().queues()) if q not in control]
    return plan(options, functions, control, get_settings().control_threads)


def run_worker(options: Sequence[str]) -> int:
    """Start the worker (and its control worker, see :func:`split_plan`); its exit status."""
    from tasks.app import app

    split = split_plan(options)
    if split is None:
        app.worker_main(argv=worker_argv(options))
        return 0
    control = ControlWorker(split.control)
    forward = _forwarder(control)
    from celery.signals import worker_shutting_down

    worker_shutting_down.connect(forward, weak=False)
    control.start()
    try:
        app.worker_main(argv=worker_argv(split.pool))
    finally:
        control.stop()
        worker_shutting_down.disconnect(forward)
    return 0


def _forwarder(control: ControlWorker) -> Any:
    """A ``worker_shutting_down`` receiver passing the pool's signal on to ``control``."""

    def forward(sig: str = "", **kwargs: Any) -> None:
        if sig in _FORWARDED:
            control.forward(_FORWARDED[sig])

    return forward
