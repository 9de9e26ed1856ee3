"""``toolfan worker``: a Celery worker on every function queue plus the control queues."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.queues import ControlQueue, all_queues
from tasks.settings import load_registry


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
    for i, option in enumerate(options):
        if option in ("-Q", "--queues") and i + 1 < len(options):
            return options[i + 1].split(",")
        for prefix in ("--queues=", "-Q"):
            if option.startswith(prefix) and len(option) > len(prefix):
                return option[len(prefix) :].split(",")
    return None


def serves_control_queues(options: Sequence[str]) -> bool:
    """Whether the worker consumes ``toolfan.submit`` or ``toolfan.poll`` (the API's users)."""
    queues = queues_option(options)
    return queues is None or any(q.strip() in set(ControlQueue) for q in queues)


def run_worker(options: Sequence[str]) -> int:
    """Start the worker in this process and return its exit status."""
    from tasks.app import app

    app.worker_main(argv=worker_argv(options))
    return 0
