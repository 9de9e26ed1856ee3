"""The Celery app and its configuration, nothing else: ``celery -A tasks worker`` works."""

from __future__ import annotations

from celery import Celery

from tasks.config import celery_config
from tasks.settings import get_settings, load_registry
from tasks.sources import task_modules

app = Celery("toolfan", include=["tasks.execute", "tasks.submit", *task_modules()])
app.conf.update(celery_config(get_settings(), load_registry()))
