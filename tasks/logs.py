"""Structured logs: one JSON object per line, with the ids of the call it is about.

``TOOLFAN_LOG_FORMAT=json`` (the default for workers and pollers) or ``text``. Fields given
through ``extra=`` (session, turn and call ids, function, elapsed ms, output length,
outcome) become top-level keys, so a log pipeline can filter on them. Argument values are
logged at DEBUG only, and secrets are never passed to a logger in the first place.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from typing import Any

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
#: ``data`` is Celery's context of a task log line, which holds the task's argument values.
_SKIPPED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName", "data"}


class JSONFormatter(logging.Formatter):
    """Format records as JSON lines: time, level, logger, message, then the extras."""

    def format(self, record: logging.LogRecord) -> str:
        """One JSON object, on one line."""
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update((k, v) for k, v in vars(record).items() if k not in _SKIPPED)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def log_format() -> str:
    """``json`` or ``text``, from ``TOOLFAN_LOG_FORMAT``."""
    return "text" if os.environ.get("TOOLFAN_LOG_FORMAT", "json").lower() == "text" else "json"


def use_json(logger: logging.Logger) -> None:
    """Give every handler of ``logger`` the JSON formatter (when JSON is configured)."""
    if log_format() == "json":
        for handler in logger.handlers:
            handler.setFormatter(JSONFormatter())


def quiet_celery_results() -> None:
    """Keep Celery from logging task return values (tool outputs) except at DEBUG.

    Our own line per call says how it ended without the output itself.
    """
    trace = logging.getLogger("celery.app.trace")
    if trace.getEffectiveLevel() > logging.DEBUG:
        trace.setLevel(logging.WARNING)
