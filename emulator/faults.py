"""Fault injection knobs: the ways the real API misbehaves, made reproducible.

Every random choice comes from one seeded :class:`random.Random`, so a test that sets
``seed`` sees the same faults on every run. ``budget`` caps how many faults are injected in
total, which turns "fail twice, then work" into ``error_rate=1.0, budget=2``.

The page faults (``list_repeat_cursor``, ``list_endless``, ``list_garbage``) are not dice:
while set, they shape every answer of ``GET /agents/sessions`` (see ``emulator.pages``).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Endpoint = Literal[
    "list", "retrieve", "events", "stream", "runs", "threads", "submit_outputs", "cancel"
]
#: Every endpoint name: the sessions API's four, then the run-shaped API's (``runs``: retrieve
#: and list runs; ``threads``: Foundry's thread list; ``submit_outputs``; ``cancel``: a run's).
ENDPOINTS: frozenset[str] = frozenset(
    {"list", "retrieve", "events", "stream", "runs", "threads", "submit_outputs", "cancel"}
)
Fault = Literal["error", "throttle"]
#: The values of ``list_garbage``: no JSON, a body nested 5,000 deep, a bare array.
GARBAGE_KINDS: frozenset[str] = frozenset({"not_json", "deep", "array"})


def _rate(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {value}")


@dataclass(frozen=True)
class Faults:
    """The fault configuration; immutable so a change is one atomic swap.

    Attributes:
        error_rate: Probability of answering 500 instead of handling the request.
        throttle_rate: Probability of answering 429 with ``Retry-After``.
        retry_after: Seconds announced by a 429 (``Retry-After`` is rounded up to whole
            seconds as HTTP requires; ``retry-after-ms`` carries the exact value).
        latency: Seconds added before every answer on a scoped endpoint.
        answer_delay: Seconds between applying an accepted batch and answering 202, so a
            client that dies in that window has had its batch applied without knowing.
        apply_lag: Seconds between accepting a batch (202) and clearing the answered
            actions; meanwhile the session shows the same ``required_actions``.
        lost_202_rate: Probability that an accepted batch (or tool-output submit) is applied
            and the connection is then dropped without an answer.
        endpoints: Which endpoints the rates and latency apply to.
        budget: At most this many faults (500, 429, lost 202) in total; ``None``: no cap.
        seed: Seed of the random generator, reset whenever the faults are set.
        list_repeat_cursor: Every list page ignores ``after``, repeats the first page's
            items and says ``has_more: true``: a cursor that never advances.
        list_endless: After the real sessions, list pages go on with fresh synthetic idle
            sessions and ``has_more: true``, forever.
        list_garbage: ``None``, or one of :data:`GARBAGE_KINDS`: every list answer is a
            200 whose body is that garbage instead of the page (wins over the other two).
        refuse_text: ``None``, or a text: a batch holding a tool result whose output (or
            any text part of it) or error contains it is refused with 400, ``param``
            naming that event, as a content check no client can foresee would.
    """

    error_rate: float = 0.0
    throttle_rate: float = 0.0
    retry_after: float = 1.0
    latency: float = 0.0
    answer_delay: float = 0.0
    apply_lag: float = 0.0
    lost_202_rate: float = 0.0
    endpoints: frozenset[str] = field(default=ENDPOINTS)
    budget: int | None = None
    seed: int = 0
    list_repeat_cursor: bool = False
    list_endless: bool = False
    list_garbage: str | None = None
    refuse_text: str | None = None

    def __post_init__(self) -> None:
        for name in ("error_rate", "throttle_rate", "lost_202_rate"):
            _rate(name, getattr(self, name))
        for name in ("retry_after", "latency", "answer_delay", "apply_lag"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        unknown = set(self.endpoints) - ENDPOINTS
        if unknown:
            raise ValueError(f"unknown endpoints {sorted(unknown)}; known: {sorted(ENDPOINTS)}")
        if self.budget is not None and self.budget < 0:
            raise ValueError("budget must not be negative")
        for name in ("list_repeat_cursor", "list_endless"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false")
        if self.refuse_text is not None and not (
            isinstance(self.refuse_text, str) and self.refuse_text
        ):
            raise ValueError("refuse_text must be null or a non-empty string")
        if self.list_garbage is not None and self.list_garbage not in GARBAGE_KINDS:
            raise ValueError(
                f"list_garbage must be null or one of {sorted(GARBAGE_KINDS)}, "
                f"got {self.list_garbage!r}"
            )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Faults:
        """Build from the admin API's JSON; unknown keys are an error, not ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown fault knobs {sorted(unknown)}; known: {sorted(names)}")
        values = dict(data)
        if "endpoints" in values:
            values["endpoints"] = frozenset(values["endpoints"])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The JSON form the admin API shows."""
        data = dataclasses.asdict(self)
        data["endpoints"] = sorted(self.endpoints)
        return data

    def retry_after_headers(self) -> dict[str, str]:
        """Both throttling headers the OpenAI API sends."""
        return {
            "Retry-After": str(math.ceil(self.retry_after)),
            "retry-after-ms": str(round(self.retry_after * 1000)),
        }


class FaultInjector:
    """Rolls the dice for each request; not thread-safe, the state's lock guards it."""

    def __init__(self, faults: Faults | None = None) -> None:
        self.faults = Faults()
        self._rng = random.Random(0)  # noqa: S311 - fault injection, not cryptography
        self._budget: int | None = None
        self.configure(faults or Faults())

    def configure(self, faults: Faults) -> None:
        """Swap the configuration and restart the random sequence and the budget."""
        self.faults = faults
        self._rng = random.Random(faults.seed)  # noqa: S311 - fault injection
        self._budget = faults.budget

    def latency(self, endpoint: str) -> float:
        """Seconds to wait before answering on ``endpoint``."""
        return self.faults.latency if endpoint in self.faults.endpoints else 0.0

    def roll(self, endpoint: str) -> Fault | None:
        """Decide whether this request fails with a 500 or a 429 instead of being handled."""
        if endpoint not in self.faults.endpoints:
            return None
        if self._hit(self.faults.error_rate):
            return "error"
        if self._hit(self.faults.throttle_rate):
            return "throttle"
        return None

    def roll_lost(self, endpoint: str = "events") -> bool:
        """Decide whether an accepted write (a batch, a submit) on ``endpoint`` loses its answer."""
        return endpoint in self.faults.endpoints and self._hit(self.faults.lost_202_rate)

    def _hit(self, rate: float) -> bool:
        if rate <= 0.0 or self._budget == 0:
            return False
        if self._rng.random() >= rate:
            return False
        if self._budget is not None:
            self._budget -= 1
        return True
