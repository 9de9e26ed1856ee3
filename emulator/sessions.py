"""One emulated session; no locking here, the state locks.

Besides its plain fields a session may hold raw JSON texts (see ``emulator.jsontext``):
``raw`` fields served in place of (or next to) its own, and raw required actions, each
standing for one ``function_call`` identity so an answer to it is accepted like any other.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from emulator.jsontext import RawJson, dumps
from emulator.wire import FUNCTION_CALL, JSON, ActionKey, action_key, agent_json, default_tools

_RAW_ACTION_KEYS = frozenset({"json", "turn_id", "call_id"})
#: Optional: the function the raw action calls, for the agent's default ``tools``.
_RAW_ACTION_OPTIONAL = frozenset({"name"})


@dataclass(frozen=True)
class RawAction:
    """A required action served as raw JSON text, answerable as the call it names.

    Attributes:
        json: The action's JSON text, appended verbatim to ``required_actions``.
        turn_id: The ``turn_id`` an answer must carry.
        call_id: The ``call_id`` an answer must carry.
        name: The function it calls, when given: the agent's default ``tools`` list it,
            as they list the plain calls' functions.
    """

    json: RawJson
    turn_id: str
    call_id: str
    name: str | None = None

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> RawAction:
        """Build from ``{"json": <text>, "turn_id": ..., "call_id": ...[, "name"]}``, strictly."""
        keys = set(spec) if isinstance(spec, Mapping) else set()
        if not _RAW_ACTION_KEYS <= keys <= _RAW_ACTION_KEYS | _RAW_ACTION_OPTIONAL:
            raise ValueError(
                f"a raw action needs the keys {sorted(_RAW_ACTION_KEYS)} (and may name the "
                "function it calls: 'name')"
            )
        for name in ("turn_id", "call_id"):
            if not isinstance(spec[name], str) or not spec[name]:
                raise ValueError(f"a raw action's {name!r} must be a non-empty string")
        function = spec.get("name")
        if function is not None and not isinstance(function, str):
            raise ValueError("a raw action's 'name' must be a string")
        return cls(RawJson(spec["json"]), spec["turn_id"], spec["call_id"], function)

    @property
    def key(self) -> ActionKey:
        """The identity an answer refers to, as for a plain ``function_call``."""
        return (FUNCTION_CALL, self.turn_id, self.call_id)


def raw_fields(raw: Mapping[str, str] | None) -> dict[str, RawJson]:
    """Validate ``{field: <raw JSON text>}`` into the form a session keeps."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError("'raw' must map field names to raw JSON texts")
    for name in raw:
        if not isinstance(name, str):
            raise ValueError(f"a raw field name must be a string, got {name!r}")
    return {name: RawJson(text) for name, text in raw.items()}


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
    raw_actions: list[RawAction] = field(default_factory=list)
    raw: dict[str, RawJson] = field(default_factory=dict)
    answered: set[ActionKey] = field(default_factory=set)
    clears: list[_PendingClear] = field(default_factory=list)
    busy_until: float = 0.0
    error: str | None = None
    version: int = 0
    _text: tuple[tuple[int, str], RawJson] | None = field(default=None, repr=False, compare=False)

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

    def add_actions(self, actions: Iterable[JSON], raw_actions: Iterable[RawAction] = ()) -> None:
        """Append actions, ignoring ones already present (same identity, plain or raw)."""
        present = self._keys()
        for action in actions:
            if "type" not in action:
                raise ValueError(f"a required action needs a 'type': {action!r}")
            if action_key(action) not in present:
                self.required_actions.append(copy.deepcopy(dict(action)))
                present.add(action_key(action))
        for raw in raw_actions:
            if raw.key not in present:
                self.raw_actions.append(raw)
                present.add(raw.key)
        self.busy_until = 0.0 if self._has_actions() else self.busy_until
        self._touch()

    def _keys(self) -> set[ActionKey]:
        return {action_key(a) for a in self.required_actions} | {r.key for r in self.raw_actions}

    def _has_actions(self) -> bool:
        return bool(self.required_actions or self.raw_actions)

    def pending_keys(self) -> set[ActionKey]:
        """Actions still waiting for an answer (listed and not answered by a batch)."""
        return self._keys() - self.answered

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
        before = self._has_actions()
        if clear.cancel:
            self.required_actions.clear()
            self.raw_actions.clear()
            self.answered.clear()
            self.busy_until = 0.0
            return
        self.required_actions = [
            a for a in self.required_actions if action_key(a) not in clear.keys
        ]
        self.raw_actions = [r for r in self.raw_actions if r.key not in clear.keys]
        self.answered -= clear.keys
        finished = before and not self._has_actions()
        if finished or (clear.starts_turn and not self._has_actions()):
            self.busy_until = now + turn_duration

    def _touch(self) -> None:
        self.version += 1
        self.last_active_at = int(time.time())

    def status(self, now: float) -> str:
        """The status the API reports, derived from the actions and the emulated turn."""
        if self.error is not None:
            return "failed"
        if self._has_actions():
            return "requires_action"
        return "in_progress" if now < self.busy_until else "idle"

    def text(self, now: float) -> RawJson:
        """:meth:`to_json` rendered, made again only once the session visibly changed.

        A poller lists every session on every pass, answered or not: rendering each one
        anew made the pages most of the emulator's work (and so of a benchmark's API share).
        What a page shows changes only with :attr:`version` (every change of actions goes
        through :meth:`_touch`) or the status (a turn's end is a matter of time); the raw
        fields and the error are set before a session is first shown.
        """
        key = (self.version, self.status(now))
        if self._text is None or self._text[0] != key:
            self._text = (key, RawJson.rendered(dumps(self.to_json(now))))
        return self._text[1]

    def to_json(self, now: float) -> JSON:
        """The ``agent.session`` object, with every field the SDK requires.

        Raw fields replace the session's own (keeping their place) or follow them; raw
        actions follow the plain ones. Both stay :class:`RawJson` values here, spliced
        verbatim when the object is rendered.
        """
        named = [{"type": FUNCTION_CALL, "name": r.name} for r in self.raw_actions if r.name]
        tools = (
            self.tools
            if self.tools is not None
            else default_tools([*self.required_actions, *named])
        )
        actions: list[Any] = copy.deepcopy(self.required_actions)
        actions.extend(r.json for r in self.raw_actions)
        data: JSON = {
            "id": self.id,
            "object": "agent.session",
            "status": self.status(now),
            "required_actions": actions,
            "metadata": dict(self.metadata),
            "created_at": self.created_at,
            "last_active_at": self.last_active_at,
            "agent": agent_json(self.agent_id, copy.deepcopy(tools)),
            "environment": {"type": "none"},
            "error": self.error,
            "usage": None,
            "vault_ids": [],
        }
        data.update(self.raw)
        return data
