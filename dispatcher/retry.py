"""Retry timing: backoff with full jitter, bounded by attempts and time, and ``Retry-After``.

Kept apart from the client so the arithmetic can be tested without a server.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry a retryable failure.

    Attributes:
        max_attempts: Requests sent at most, the first one included.
        initial_delay: Upper bound of the first backoff, in seconds.
        max_delay: Upper bound of any backoff, in seconds.
        max_elapsed: No retry starts once this many seconds have passed since the first
            attempt (one request may still overrun it by its own timeout).
    """

    max_attempts: int = 5
    initial_delay: float = 0.5
    max_delay: float = 10.0
    max_elapsed: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if min(self.initial_delay, self.max_delay, self.max_elapsed) < 0:
            raise ValueError("delays must not be negative")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full jitter: uniform over [0, min(max_delay, initial_delay * 2^(attempt-1))]."""
        ceiling = min(self.max_delay, self.initial_delay * 2 ** (attempt - 1))
        return rng.uniform(0.0, ceiling)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``Retry-After`` (seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))
