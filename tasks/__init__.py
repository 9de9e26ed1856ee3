"""The Celery side of toolfan: app, queues, the ``execute`` task and the Redis ledger."""

from tasks import signals  # noqa: F401 - connects the worker hooks
from tasks.app import app

__all__ = ["app"]
