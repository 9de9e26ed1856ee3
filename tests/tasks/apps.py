"""A Celery app of a test's own, with toolfan's configuration, on a private redis-server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery


@contextmanager
def private_app(name: str, cls: type[Celery] = Celery) -> Iterator[Celery]:
    """An app of class ``cls``: broker on database 0 of a private server, results on 1.

    No worker consumes its queues, so what a test sends stays where it reads it, and the
    server's counters are the test's alone.
    """
    from dispatcher.devstack import private_redis
    from tasks.config import celery_config
    from tasks.settings import get_settings, load_registry

    with private_redis() as base:
        app = cls(name, set_as_current=False)
        app.conf.update(celery_config(get_settings(), load_registry()))
        app.conf.update(broker_url=f"{base}/0", result_backend=f"{base}/1")
        try:
            yield app
        finally:
            app.close()
