"""Fault knobs of the model endpoints: fail the next N model calls, delay every one.

The sessions and runs faults are dice over a fixed set of endpoint names; a tool loop's
test wants something plainer and exact, "the next two model calls answer 429", so these
knobs count instead of rolling. The errors carry the same texts and headers as the other
endpoints' faults (a 429 announces ``Retry-After`` and ``retry-after-ms``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from emulator.faults import Faults
from emulator.wire import JSON, WireError

#: The statuses a failing model call may answer with.
FAULT_STATUSES = (429, 500, 503)


def _number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


@dataclass(frozen=True)
class ChatFaults:
    """The model endpoints' fault configuration; immutable, replaced whole.

    Attributes:
        fail_next: How many of the next model calls fail (counting down as they do).
        status: What they answer: 429 (throttled), 500 or 503.
        retry_after: Seconds a 429 announces.
        delay: Seconds every model call waits before it is answered (or failed).
    """

    fail_next: int = 0
    status: int = 500
    retry_after: float = 1.0
    delay: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.fail_next, bool) or not isinstance(self.fail_next, int):
            raise ValueError(f"fail_next must be an integer >= 0, got {self.fail_next!r}")
        _number("fail_next", self.fail_next)
        if self.status not in FAULT_STATUSES:
            raise ValueError(f"status must be one of {list(FAULT_STATUSES)}, got {self.status!r}")
        _number("retry_after", self.retry_after)
        _number("delay", self.delay)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChatFaults:
        """Build from the admin API's JSON; unknown keys are an error, not ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown chat fault knobs {unknown}; known: {sorted(names)}")
        return cls(**data)

    def to_json(self) -> JSON:
        """The JSON form the admin API shows (``fail_next``: the failures still to come)."""
        return dataclasses.asdict(self)

    def spent(self) -> ChatFaults:
        """The configuration after one more call has failed."""
        return dataclasses.replace(self, fail_next=max(0, self.fail_next - 1))

    def error(self) -> WireError:
        """The answer of a failing call."""
        if self.status == 429:
            return WireError(
                429,
                "Rate limit reached for requests (emulated). Please try again later.",
                type="requests",
                code="rate_limit_exceeded",
                headers=Faults(retry_after=self.retry_after).retry_after_headers(),
            )
        return WireError(
            self.status,
            "The server had an error while processing your request. Sorry about that! (emulated)",
            type="server_error",
        )


@dataclass(frozen=True)
class FaultPlan:
    """What happens to one model call: a delay first, then maybe an error.

    Attributes:
        delay: Seconds to wait.
        error: The error to answer with, or ``None`` to answer normally.
        outcome: ``throttle`` or ``error`` when failing (the request log's outcome).
    """

    delay: float = 0.0
    error: WireError | None = None
    outcome: str | None = None
