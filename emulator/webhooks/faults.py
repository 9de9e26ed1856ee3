"""Fault knobs of webhook deliveries: what a real push channel does to a receiver.

Delivery is at least once and unordered, retried for a long time, sometimes never: a
receiver must deduplicate by ``webhook-id``, tolerate any order, answer fast, and keep a
safety-net poll for events that never come. Each knob makes one of those properties
visible on demand. Every random choice comes from one :class:`random.Random` seeded by
``seed`` and restarted whenever the knobs are set, so a test sees the same faults on every
run (given the same sequence of events).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from emulator.wire import JSON

_RATES = ("duplicate", "drop", "stale")
_AMOUNTS = ("reorder", "delay", "retry_base")
_COUNTS = ("fail_first", "seed")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


@dataclass(frozen=True)
class WebhookFaults:
    """The delivery configuration; immutable, replaced whole.

    Attributes:
        duplicate: Probability that an event is delivered twice (the copy has the same
            ``webhook-id`` and body, and its own attempts).
        reorder: Milliseconds; each event's first attempt is held for a random part of
            this window, so events created close together arrive shuffled.
        delay: Milliseconds added before every event's first attempt.
        fail_first: The first N attempts of every delivery are lost: not sent, recorded
            as failed, then retried with backoff as usual (they count as attempts).
        drop: Probability that an event is never delivered at all, to any endpoint.
        stale: Probability that, when a session stops waiting (its actions are all
            answered or cancelled), an extra ``action_required`` event is sent for it.
        retry_base: Seconds before the first retry; attempt n+1 follows attempt n after
            ``retry_base * 2 ** (n - 1)``.
        max_attempts: Attempts per delivery before giving up.
        timeout: Seconds an attempt may take before it counts as failed.
        concurrency: Deliveries in flight at once (1: strictly in due order).
        seed: Seed of the fault dice.
    """

    duplicate: float = 0.0
    reorder: float = 0.0
    delay: float = 0.0
    fail_first: int = 0
    drop: float = 0.0
    stale: float = 0.0
    retry_base: float = 1.0
    max_attempts: int = 8
    timeout: float = 5.0
    concurrency: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in _RATES:
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability between 0 and 1, got {value!r}")
        for name in _AMOUNTS:
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        for name in _COUNTS:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if not _is_number(self.timeout) or self.timeout <= 0:
            raise ValueError(f"timeout must be a number > 0, got {self.timeout!r}")
        for name in ("max_attempts", "concurrency"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WebhookFaults:
        """Build from the admin API's JSON; unknown keys are an error, not ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown webhook fault knobs {unknown}; known: {sorted(names)}")
        return cls(**data)

    def to_json(self) -> JSON:
        """The JSON form the admin API shows."""
        return dataclasses.asdict(self)

    def backoff(self, attempt: int) -> float:
        """Seconds between failed attempt number ``attempt`` (1-based) and the next one."""
        return float(self.retry_base * 2 ** (attempt - 1))


class Dice:
    """The seeded dice of one fault configuration; not thread-safe, the state locks."""

    def __init__(self, faults: WebhookFaults) -> None:
        self.faults = faults
        self._rng = random.Random(faults.seed)  # noqa: S311 - fault injection, not cryptography

    def hit(self, rate: float) -> bool:
        """True with probability ``rate`` (no roll at all for 0, so sequences stay short)."""
        return rate > 0.0 and self._rng.random() < rate

    def first_delay(self) -> float:
        """Seconds before an event's first attempt: ``delay`` plus a share of ``reorder``."""
        held = self._rng.uniform(0.0, self.faults.reorder) if self.faults.reorder else 0.0
        return (self.faults.delay + held) / 1000.0
