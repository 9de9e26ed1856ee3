"""The Celery app and its configuration, nothing else: ``celery -A tasks worker`` works."""

from __future__ import annotations

from celery import Celery

from tasks.config import celery_config
from tasks.settings import get_settings, load_registry

app = Celery("toolfan", include=["tasks.execute", "tasks.submit", "tasks.poll"])
app.conf.update(celery_config(get_settings(), load_registry()))
