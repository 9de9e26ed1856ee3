"""Say a problem once: a malformed entry the API keeps listing is logged on its first pass.

A session with an unreadable entry is listed again on every pass, for as long as it waits.
Logging it each time would bury everything else, so the poller remembers what it already
reported (bounded, oldest forgotten first) and logs a repeat at DEBUG only. The pass's
error count still counts every occurrence, so the metrics and the summary line stay exact.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict

#: Problems remembered at most.
LIMIT = 10_000


class OnceLog:
    """Logs each (subject, problem) pair at its level the first time, at DEBUG after."""

    def __init__(self, logger: logging.Logger, limit: int = LIMIT) -> None:
        self._log = logger
        self._limit = limit
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def error(self, subject: str | None, message: str, *args: object) -> None:
        """Log ``message % args`` at ERROR unless this subject already had it."""
        key = hashlib.sha256(repr((subject, message, args)).encode("utf-8", "replace")).digest()
        if key in self._seen:
            self._seen.move_to_end(key)
            self._log.debug(message, *args)
            return
        self._seen[key] = None
        while len(self._seen) > self._limit:
            self._seen.popitem(last=False)
        self._log.error(message, *args)
