"""One emulated session and the cursor page over many; no locking here, the state locks."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from emulator.validation import ListQuery
from emulator.wire import JSON, ActionKey, WireError, action_key, agent_json, default_tools


@dataclass
class _PendingClear:
    """Actions answered by an accepted batch, cleared when ``due`` passes (the 202 lag)."""

    due: float
    keys: set[ActionKey]
    cancel: bool
    starts_turn: bool


@dataclass
class Session:
    """The mutable record behind one ``agent.session`` object."""

    id: str
    seq: int
    agent_id: str
    metadata: dict[str, str]
    tools: list[JSON] | None
    created_at: int
    last_active_at: int
    required_actions: list[JSON] = field(default_factory=list)
    answered: set[ActionKey] = field(default_factory=set)
    clears: list[_PendingClear] = field(default_factory=list)
    busy_until: float = 0.0
    error: str | None = None
    version: int = 0

    @classmethod
    def new(
        cls,
        session_id: str,
        seq: int,
        agent_id: str,
        metadata: Mapping[str, str],
        tools: Iterable[JSON] | None,
    ) -> Session:
        """A fresh idle session."""
        now = int(time.time())
        return cls(
            id=session_id,
            seq=seq,
            agent_id=agent_id,
            metadata=dict(metadata),
            tools=None if tools is None else [dict(t) for t in tools],
            created_at=now,
            last_active_at=now,
        )

    def add_actions(self, actions: Iterable[JSON]) -> None:
        """Append actions, ignoring ones already present (same identity)."""
        present = {action_key(a) for a in self.required_actions}
        for action in actions:
            if "type" not in action:
                raise ValueError(f"a required action needs a 'type': {action!r}")
            if action_key(action) not in present:
                self.required_actions.append(copy.deepcopy(dict(action)))
                present.add(action_key(action))
        self.busy_until = 0.0 if self.required_actions else self.busy_until
        self._touch()

    def pending_keys(self) -> set[ActionKey]:
        """Actions still waiting for an answer (listed and not answered by a batch)."""
        return {action_key(a) for a in self.required_actions} - self.answered

    def accept(self, keys: set[ActionKey], due: float, cancel: bool, starts_turn: bool) -> None:
        """Register an accepted batch; its effect shows once ``due`` passes."""
        self.answered |= keys
        self.clears.append(_PendingClear(due, keys, cancel, starts_turn))

    def settle(self, now: float, turn_duration: float) -> None:
        """Apply every accepted batch whose lag has passed."""
        due = [c for c in self.clears if c.due <= now]
        if not due:
            return
        self.clears = [c for c in self.clears if c.due > now]
        for clear in due:
            self._apply(clear, now, turn_duration)
        self._touch()

    def _apply(self, clear: _PendingClear, now: float, turn_duration: float) -> None:
        before = len(self.required_actions)
        if clear.cancel:
            self.required_actions.clear()
            self.answered.clear()
            self.busy_until = 0.0
            return
        self.required_actions = [
            a for a in self.required_actions if action_key(a) not in clear.keys
        ]
        self.answered -= clear.keys
        finished = before > 0 and not self.required_actions
        if finished or (clear.starts_turn and not self.required_actions):
            self.busy_until = now + turn_duration

    def _touch(self) -> None:
        self.version += 1
        self.last_active_at = int(time.time())

    def status(self, now: float) -> str:
        """The status the API reports, derived from the actions and the emulated turn."""
        if self.error is not None:
            return "failed"
        if self.required_actions:
            return "requires_action"
        return "in_progress" if now < self.busy_until else "idle"

    def to_json(self, now: float) -> JSON:
        """The ``agent.session`` object, with every field the SDK requires."""
        tools = self.tools if self.tools is not None else default_tools(self.required_actions)
        return {
            "id": self.id,
            "object": "agent.session",
            "status": self.status(now),
            "required_actions": copy.deepcopy(self.required_actions),
            "metadata": dict(self.metadata),
            "created_at": self.created_at,
            "last_active_at": self.last_active_at,
            "agent": agent_json(self.agent_id, copy.deepcopy(tools)),
            "environment": {"type": "none"},
            "error": self.error,
            "usage": None,
            "vault_ids": [],
        }


def _matches(session: Session, query: ListQuery) -> bool:
    if query.agent_id is not None and session.agent_id != query.agent_id:
        return False
    return all(session.metadata.get(k) == v for k, v in query.metadata.items())


def page(sessions: list[Session], query: ListQuery, now: float, turn_duration: float) -> JSON:
    """One page of ``GET /agents/sessions``, ordered by creation, after the cursor."""
    ordered = sorted(sessions, key=lambda s: s.seq, reverse=query.order == "desc")
    if query.after is not None:
        ids = [s.id for s in ordered]
        if query.after not in ids:
            raise WireError(
                400, f"Invalid 'after': no session with id '{query.after}'.", param="after"
            )
        ordered = ordered[ids.index(query.after) + 1 :]
    matching = [s for s in ordered if _matches(s, query)]
    chosen = matching[: query.limit]
    for session in chosen:
        session.settle(now, turn_duration)
    data = [s.to_json(now) for s in chosen]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(matching) > len(chosen),
    }
