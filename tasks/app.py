"""The Celery app and its configuration, nothing else: ``celery -A tasks worker`` works."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.app import backends

from tasks.config import celery_config
from tasks.join import backend_class
from tasks.settings import get_settings, load_registry
from tasks.sources import task_modules


class Toolfan(Celery):
    """Celery, with the result backend that joins toolfan's chords (:mod:`tasks.join`)."""

    def _get_backend(self) -> Any:
        found: Any = backends.by_url(self.backend_cls or self.conf.result_backend, self.loader)
        cls, url = found  # (class, URL): the stubs say the class alone
        return backend_class(cls)(app=self, url=url)


app = Toolfan("toolfan", include=["tasks.execute", "tasks.submit", *task_modules()])
app.conf.update(celery_config(get_settings(), load_registry()))
