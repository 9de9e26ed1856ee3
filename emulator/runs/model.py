"""One emulated run and its lifecycle; no locking here, the state locks.

Time is the state's monotonic clock. Every change that time brings (the emulated model turn
after a submit, the expiry) is settled lazily by :meth:`Run.settle` on each read or write,
so no timer runs. Wall-clock timestamps are derived from the monotonic instants through
the offset taken at creation, so a controllable clock moves them consistently.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from emulator.wire import JSON, WireError

#: Statuses a run never leaves.
TERMINAL = frozenset({"completed", "failed", "cancelled", "expired", "incomplete"})
#: Statuses ``create_run(status=...)`` accepts besides the default ``requires_action``.
CREATE_STATUSES = frozenset(
    {"requires_action", "queued", "in_progress", "completed", "failed", "cancelled", "expired"}
)
_FAILURE = {"code": "server_error", "message": "The run failed (emulated)."}
_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def invalid_state(message: str) -> WireError:
    """The 400 a run answers to a request its status does not allow."""
    return WireError(400, message, code="invalid_run_state")


@dataclass
class Run:
    """The mutable record behind one ``thread.run`` object.

    Attributes:
        phases: Each phase's wire tool calls; ``phase`` indexes the current one.
        queued_from: When the current turn was queued (a submit's answer, rendered at that
            very instant, says ``queued`` even when the turn takes no time).
        queued_until: While ``now`` is before it the run is ``queued`` (a turn starting).
        busy_until: While ``now`` is before it (and past ``queued_until``) the run is
            ``in_progress``; ``None`` when no turn runs.
        expires: The monotonic instant of expiry, ``None`` for never.
        final: The terminal status once reached, with ``final_at`` its instant.
        offset: Wall-clock seconds minus monotonic seconds, fixed at creation.
    """

    id: str
    thread_id: str
    seq: int
    assistant_id: str
    metadata: dict[str, str]
    tools: list[JSON]
    phases: list[list[JSON]]
    created: float
    offset: float
    expires: float | None
    phase: int = 0
    queued_from: float = -math.inf
    queued_until: float = -math.inf
    busy_until: float | None = None
    started: float | None = None
    final: str | None = None
    final_at: float = 0.0
    error: JSON | None = None

    def _wall(self, instant: float) -> int:
        return int(instant + self.offset)

    # --- time --------------------------------------------------------------------------------

    def settle(self, now: float) -> None:
        """Apply what time has done: a finished turn, then the expiry."""
        if self.final is not None:
            return
        turn_end = self.busy_until
        if turn_end is not None and turn_end <= now and not self._expired_by(turn_end):
            self.busy_until = None
            self.started = turn_end if self.started is None else self.started
            if self.phase >= len(self.phases):
                self._finish("completed", turn_end)
                return
        if self.expires is not None and self.expires <= now:
            self._finish("expired", self.expires)

    def _expired_by(self, instant: float) -> bool:
        return self.expires is not None and self.expires < instant

    def _finish(self, status: str, at: float) -> None:
        self.final, self.final_at, self.busy_until = status, at, None

    def start_turn(self, now: float, turn_duration: float, *, queued: bool = True) -> None:
        """Begin an emulated model turn: ``queued`` for its first half, then ``in_progress``."""
        self.queued_from = now if queued else -math.inf
        self.queued_until = now + turn_duration / 2 if queued else now
        self.busy_until = now + turn_duration

    # --- reading -----------------------------------------------------------------------------

    def status(self, now: float) -> str:
        """The status the API reports (after :meth:`settle`)."""
        if self.final is not None:
            return self.final
        if self.busy_until is not None:
            queued = now < self.queued_until or now == self.queued_from
            return "queued" if queued else "in_progress"
        return "requires_action"

    def pending_calls(self) -> list[JSON]:
        """The calls of the current phase (the ones a submit must answer)."""
        return self.phases[self.phase] if self.phase < len(self.phases) else []

    def to_json(self, now: float) -> JSON:
        """The ``thread.run`` object, every field both SDKs' models require present."""
        status = self.status(now)
        return {
            "id": self.id,
            "object": "thread.run",
            "created_at": self._wall(self.created),
            "assistant_id": self.assistant_id,
            "thread_id": self.thread_id,
            "status": status,
            "started_at": None if self.started is None else self._wall(self.started),
            "expires_at": self._expires_at(status),
            "cancelled_at": self._final_at("cancelled"),
            "failed_at": self._final_at("failed"),
            "completed_at": self._final_at("completed"),
            "required_action": self._required_action(status),
            "last_error": copy.deepcopy(self.error) if status == "failed" else None,
            "model": "gpt-4o",
            "instructions": "",
            "tools": copy.deepcopy(self.tools),
            "metadata": dict(self.metadata),
            "incomplete_details": None,
            "usage": dict(_USAGE) if status in TERMINAL else None,
            "temperature": 1.0,
            "top_p": 1.0,
            "max_prompt_tokens": None,
            "max_completion_tokens": None,
            "truncation_strategy": {"type": "auto", "last_messages": None},
            "response_format": "auto",
            "tool_choice": "auto",
            "parallel_tool_calls": True,
        }

    def _expires_at(self, status: str) -> int | None:
        # A finished run no longer expires; an expired one shows when it did.
        if self.expires is None or (status in TERMINAL and status != "expired"):
            return None
        return self._wall(self.expires)

    def _final_at(self, status: str) -> int | None:
        return self._wall(self.final_at) if self.final == status else None

    def _required_action(self, status: str) -> JSON | None:
        if status != "requires_action":
            return None
        calls = copy.deepcopy(self.pending_calls())
        return {"type": "submit_tool_outputs", "submit_tool_outputs": {"tool_calls": calls}}

    # --- changes -----------------------------------------------------------------------------

    def answer(self, now: float, turn_duration: float) -> None:
        """Accept the current phase's outputs: the next turn starts (``queued``)."""
        self.phase += 1
        self.start_turn(now, turn_duration)

    def cancel(self, now: float) -> None:
        """Cancel now; 400 when the run is already terminal."""
        self._require_active(now, "cancel")
        self._finish("cancelled", now)

    def fail(self, now: float) -> None:
        """Fail now with a ``server_error``; 400 when the run is already terminal."""
        self._require_active(now, "fail")
        self.error = dict(_FAILURE)
        self._finish("failed", now)

    def expire(self, now: float) -> None:
        """Expire now; 400 when the run is already terminal."""
        self._require_active(now, "expire")
        self.expires = now
        self._finish("expired", now)

    def _require_active(self, now: float, verb: str) -> None:
        status = self.status(now)
        if status in TERMINAL:
            raise invalid_state(f"Cannot {verb} run with status '{status}'.")

    def force(self, status: str, now: float, turn_duration: float) -> None:
        """Put a new run in ``status`` (see :data:`CREATE_STATUSES`)."""
        if status not in CREATE_STATUSES:
            raise ValueError(
                f"cannot create a run with status {status!r}; one of {sorted(CREATE_STATUSES)}"
            )
        if status == "queued":
            self.started = None
            self.start_turn(now, turn_duration)
        elif status == "in_progress":
            self.start_turn(now, turn_duration, queued=False)
        elif status == "failed":
            self.fail(now)
        elif status == "cancelled":
            self.cancel(now)
        elif status == "expired":
            self.expire(now)
        elif status == "completed":
            self.phase = len(self.phases)
            self._finish("completed", now)
