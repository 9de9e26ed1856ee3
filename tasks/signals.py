"""Worker process hooks: JSON logs, the metrics endpoint, and clean-up of dead children."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_init,
    worker_process_shutdown,
)

from tasks import metrics
from tasks.logs import quiet_celery_results, use_json


@after_setup_logger.connect
@after_setup_task_logger.connect
def _structured_logs(logger: logging.Logger, **kwargs: Any) -> None:
    use_json(logger)
    quiet_celery_results()


@worker_init.connect
def _serve_metrics(**kwargs: Any) -> None:
    port = metrics.port_from_env()
    if port is not None:
        metrics.serve(port)


@worker_process_shutdown.connect
def _forget_child(pid: int | None = None, **kwargs: Any) -> None:
    metrics.process_exited(pid or os.getpid())
