"""Structured logs: one JSON object per line, with the ids of the call it is about.

``TOOLFAN_LOG_FORMAT=json`` (the default for workers and pollers) or ``text``. Fields given
through ``extra=`` (session, turn and call ids, function, elapsed ms, output length,
outcome) become top-level keys, so a log pipeline can filter on them. Argument values are
logged at DEBUG only, and secrets are never passed to a logger in the first place.

Log lines quote ids, tool errors and API messages, any of which may be megabytes long, so
every handler toolfan configures cuts the message and each string field to
``TOOLFAN_MAX_LOG_CHARS`` characters (:class:`ClipFilter`), in both formats; a traceback
may take ten times that, since its frames matter, but its exception's message is cut too.
"""

from __future__ import annotations

import json
import logging
import math
import os
from datetime import UTC, datetime
from typing import Any

from handlers.text import clip

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
#: ``data`` is Celery's context of a task log line, which holds the task's argument values.
_SKIPPED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName", "data"}


#: The encoder of every JSON line: one, since ``json.dumps`` with options builds a new one
#: per call.
_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


class JSONFormatter(logging.Formatter):
    """Format records as JSON lines: time, level, logger, message, then the extras.

    A worker writes one line per call, so the line's cost is on every call's path: the
    timestamp's date and time are built once per second (only the milliseconds change
    within it), and one encoder serves every line.
    """

    def __init__(self) -> None:
        super().__init__()
        self._second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        """One JSON object, on one line."""
        data: dict[str, Any] = {
            "ts": self._timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update((k, v) for k, v in vars(record).items() if k not in _SKIPPED)
        if record.exc_info:
            data["exception"] = record.exc_text or self.formatException(record.exc_info)
        return _ENCODER.encode(data)

    def _timestamp(self, created: float) -> str:
        """ISO 8601 in UTC to the millisecond, as ``isoformat(timespec="milliseconds")``."""
        second = math.floor(created)
        micros = round((created - second) * 1e6)  # datetime's rounding, half to even
        if micros >= 1_000_000:
            second, micros = second + 1, 0
        cached, text = self._second
        if second != cached:
            text = datetime.fromtimestamp(second, UTC).isoformat()[:19]
            self._second = (second, text)  # one assignment: threads see either pair whole
        return f"{text}.{micros // 1000:03d}+00:00"


#: A traceback may take this many fields' worth of characters: its frames matter.
TRACEBACK_FIELDS = 10
_PLAIN = logging.Formatter()


class ClipFilter(logging.Filter):
    """Cuts a record's message and its string ``extra=`` fields to ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keeps the record; rewrites what is too long in it."""
        try:
            message = record.getMessage()
        except Exception:  # a broken format: let the handler report it as usual
            return True
        if len(message) > self.limit:
            record.msg, record.args = clip(message, self.limit), None
        if record.exc_info and not record.exc_text:
            trace = _PLAIN.formatException(record.exc_info)
            record.exc_text = clip(trace, self.limit * TRACEBACK_FIELDS)
        for name, value in vars(record).items():
            if name not in _SKIPPED and isinstance(value, str) and len(value) > self.limit:
                setattr(record, name, clip(value, self.limit))
        return True


def clip_handlers(logger: logging.Logger, limit: int) -> None:
    """Give every handler of ``logger`` one :class:`ClipFilter` (idempotent)."""
    for handler in logger.handlers:
        if not any(isinstance(f, ClipFilter) for f in handler.filters):
            handler.addFilter(ClipFilter(limit))


def log_format() -> str:
    """``json`` or ``text``, from ``TOOLFAN_LOG_FORMAT``."""
    return "text" if os.environ.get("TOOLFAN_LOG_FORMAT", "json").lower() == "text" else "json"


def use_json(logger: logging.Logger) -> None:
    """Give every handler of ``logger`` the JSON formatter (when JSON is configured)."""
    if log_format() == "json":
        for handler in logger.handlers:
            handler.setFormatter(JSONFormatter())


#: Celery's loggers of a line per task at INFO: "received" (the worker's main process) and
#: "succeeded in" with the return value (the pool process).
CELERY_PER_TASK_LOGGERS = ("celery.app.trace", "celery.worker.strategy")


def quiet_celery_per_task_lines() -> None:
    """Keep Celery's own line per task out of the logs, except at DEBUG.

    The "succeeded" line carries the task's return value, a tool's output. The "received"
    line, written by the worker's main process, which takes every message off the broker
    for the whole pool, says nothing toolfan's own line per call does not (that one names
    the batch, the call, the function and how it ended); it doubled a worker's log volume
    and cost that busiest process a formatted line per call. Celery reads the level once,
    when the worker starts consuming, so this runs as logging is set up.
    """
    for name in CELERY_PER_TASK_LOGGERS:
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() > logging.DEBUG:
            logger.setLevel(logging.WARNING)


#: Loggers of the HTTP client that log every request at INFO.
HTTP_CLIENT_LOGGERS = ("httpx",)


def quiet_http_requests() -> None:
    """Keep the HTTP client's line per request out of the logs, except at DEBUG.

    httpx logs every request it makes at INFO: a worker wrote one for each batch it
    submitted, beside toolfan's own line saying which batch it was and how it went, and a
    verbose poller one for each page it listed. That line carried nothing toolfan's does
    not, and took a sixth of a worker's logging time (a profile of the no-op load).
    """
    for name in HTTP_CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() > logging.DEBUG:
            logger.setLevel(logging.WARNING)


def structured(logger: logging.Logger, limit: int) -> None:
    """Make ``logger``'s handlers toolfan's: JSON (when configured), clipped, no HTTP noise.

    What every toolfan process does to its logging once it is set up: workers, the poller
    and the intake alike.
    """
    use_json(logger)
    clip_handlers(logger, limit)
    quiet_http_requests()
