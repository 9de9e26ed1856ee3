"""``toolfan worker``: a Celery worker on every function queue plus the control queues."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.queues import all_queues
from tasks.settings import load_registry


def worker_argv(options: Sequence[str]) -> list[str]:
    """The ``celery worker`` argument list; ``-Q`` given by the user picks a subset."""
    argv = ["worker", *options]
    if not any(o in ("-Q", "--queues") or o.startswith(("-Q", "--queues=")) for o in options):
        argv += ["-Q", ",".join(all_queues(load_registry()))]
    if not any(o in ("-l", "--loglevel") or o.startswith(("-l", "--loglevel=")) for o in options):
        argv += ["--loglevel", "INFO"]
    return argv


def run_worker(options: Sequence[str]) -> int:
    """Start the worker in this process and return its exit status."""
    from tasks.app import app

    app.worker_main(argv=worker_argv(options))
    return 0
