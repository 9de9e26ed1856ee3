"""The emulator's in-memory world: sessions, runs, chat, accepted batches and submits, faults.

One :class:`EmulatorState` is shared by the HTTP app (on uvicorn's event loop) and by the
test or demo that scripts it (on another thread), so every public method takes one lock
and returns copies. Time-based behaviour (the lag before a batch clears its actions, the
emulated turn that runs before a session goes idle) is settled lazily on every read, which
keeps the emulator free of timers and deterministic under a controllable clock.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from emulator.chat.state import ChatState
from emulator.faults import FaultInjector, Faults
from emulator.pages import page
from emulator.runs.state import RunsState
from emulator.runs.store import RunStore
from emulator.sessions import RawAction, Session, raw_fields
from emulator.validation import (
    ListQuery,
    answered_key,
    check_pending,
    check_shape,
    refuse_content,
)
from emulator.webhooks.events import waiting_type
from emulator.webhooks.state import WebhookState
from emulator.wire import JSON, ActionKey, WireError, new_id

#: The request log keeps the most recent requests only, so long demos stay bounded in memory.
REQUEST_LOG_SIZE = 100_000


@dataclass(frozen=True)
class AcceptedBatch:
    """One accepted ``POST /events`` request, as the emulator received it."""

    session_id: str
    events: list[JSON]
    idempotency_key: str | None
    headers: dict[str, str]
    received_at: float
    lost: bool = False

    def to_json(self) -> JSON:
        """The admin API's form."""
        return {
            "session_id": self.session_id,
            "events": self.events,
            "idempotency_key": self.idempotency_key,
            "headers": self.headers,
            "received_at": self.received_at,
            "lost": self.lost,
        }


@dataclass(frozen=True)
class RequestRecord:
    """One API request (any flavour) and how the emulator answered it.

    ``path`` is percent-decoded for reading (an id's ``/`` shows as ``/``); ``raw_path`` is
    the path as sent, which tells an id's ``%2F`` from a separator.
    """

    method: str
    path: str
    query: str
    headers: dict[str, str]
    status: int | None
    outcome: str
    raw_path: str = ""
    at: float = field(default_factory=time.time)

    @property
    def idempotency_key(self) -> str | None:
        """The request's ``Idempotency-Key`` header, if any."""
        return self.headers.get("idempotency-key")

    def to_json(self) -> JSON:
        """The admin API's form."""
        return {
            "method": self.method,
            "path": self.path,
            "raw_path": self.raw_path,
            "query": self.query,
            "headers": self.headers,
            "status": self.status,
            "outcome": self.outcome,
            "at": self.at,
        }


def _fingerprint(session_id: str, body: Any) -> str:
    # ASCII text, so ids and bodies holding lone surrogates hash as well as any other.
    text = json.dumps([session_id, body], sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


class EmulatorState(RunsState):
    """Sessions, runs and recordings of one emulator, scriptable from Python.

    Args:
        turn_duration: Seconds an emulated turn stays ``in_progress`` after the last
            required action is answered, before the session goes ``idle``.
        stream_lifetime: Upper bound, in seconds, of one server-sent-events connection.
        clock: Monotonic clock used for lags and turns; injectable for tests.
    """

    def __init__(
        self,
        *,
        turn_duration: float = 0.2,
        stream_lifetime: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.turn_duration = turn_duration
        self.stream_lifetime = stream_lifetime
        self.clock = clock
        self._lock = threading.RLock()
        self._sessions: dict[str, Session] = {}
        self._seq = 0
        self._batches: list[AcceptedBatch] = []
        self._requests: deque[RequestRecord] = deque(maxlen=REQUEST_LOG_SIZE)
        self._keys: dict[str, str] = {}
        self._injector = FaultInjector()
        self._runs = RunStore()
        #: The scripted model of Chat Completions and Responses (``emulator.chat``).
        self.chat = ChatState()
        #: Webhook endpoints and the events pushed to them (``emulator.webhooks``).
        self.webhooks = WebhookState()

    # --- scripting -------------------------------------------------------------------------

    def create_session(
        self,
        required_actions: Iterable[JSON] = (),
        *,
        session_id: str | None = None,
        agent_id: str = "agent_emulated",
        metadata: Mapping[str, str] | None = None,
        tools: Iterable[JSON] | None = None,
        status: str | None = None,
        error: str | None = None,
        raw: Mapping[str, str] | None = None,
        raw_actions: Iterable[Mapping[str, str]] = (),
    ) -> JSON:
        """Add a session; without actions it is ``idle`` (or the given ``status``).

        ``status`` may force ``in_progress`` (a turn running until actions are added) or
        ``failed`` (with ``error``); otherwise it follows from the actions. ``raw`` maps
        field names to JSON texts served verbatim instead of (or besides) the session's own
        fields; ``raw_actions`` are ``{"json", "turn_id", "call_id"}`` required actions
        served verbatim and answerable as that call. In the returned dict both appear as
        ``RawJson`` values.
        """
        fields, raws = raw_fields(raw), [RawAction.from_spec(a) for a in raw_actions]
        with self._lock:
            sid = session_id or new_id("sess")
            if sid in self._sessions:
                raise ValueError(f"session {sid} exists already")
            session = Session.new(sid, self._seq + 1, agent_id, metadata or {}, tools)
            session.add_actions(required_actions, raws)
            session.raw = fields
            if status == "in_progress":
                session.busy_until = float("inf")
            elif status == "failed":
                session.error = error or "The session failed (emulated)."
            elif status not in {None, "idle", "requires_action"}:
                raise ValueError(f"cannot create a session with status {status!r}")
            self._seq += 1
            self._sessions[sid] = session
            self._announce(session, set())
            return session.to_json(self.clock())

    def add_actions(
        self,
        session_id: str,
        actions: Iterable[JSON],
        raw_actions: Iterable[Mapping[str, str]] = (),
    ) -> JSON:
        """Append required actions (a new turn, a sub-agent's calls) to a session.

        ``raw_actions`` are as for :meth:`create_session`.
        """
        raws = [RawAction.from_spec(a) for a in raw_actions]
        with self._lock:
            session = self._get(session_id)
            before = session.pending_keys()
            session.add_actions(actions, raws)
            self._announce(session, before)
            return session.to_json(self.clock())

    def set_faults(self, faults: Faults | None = None, **knobs: Any) -> Faults:
        """Replace the fault configuration (an object, or knobs over the defaults)."""
        with self._lock:
            self._injector.configure(faults or Faults(**knobs))
            return self._injector.faults

    @property
    def faults(self) -> Faults:
        """The current fault configuration."""
        with self._lock:
            return self._injector.faults

    def reset(self) -> None:
        """Forget sessions, runs, chat scripts and responses, recordings, keys and faults.

        Webhook endpoints go too, and every queued delivery is abandoned.
        """
        with self._lock:
            self.chat.clear()
            self.webhooks.clear()
            self._runs.clear()
            self._sessions.clear()
            self._batches.clear()
            self._requests.clear()
            self._keys.clear()
            self._injector.configure(Faults())

    # --- reading back ----------------------------------------------------------------------

    def session(self, session_id: str) -> JSON:
        """The session as ``GET /agents/sessions/{id}`` would show it now."""
        with self._lock:
            return self._get(session_id).to_json(self.clock())

    def session_ids(self) -> list[str]:
        """Every session id, oldest first."""
        with self._lock:
            return list(self._sessions)

    def batches(self, session_id: str | None = None) -> list[AcceptedBatch]:
        """Every accepted batch (replays excluded), oldest first."""
        with self._lock:
            return [b for b in self._batches if session_id in (None, b.session_id)]

    def requests(self, path_contains: str = "", method: str | None = None) -> list[RequestRecord]:
        """Every API request received (any flavour), including faulted ones, oldest first.

        ``path_contains`` matches the decoded ``path`` or the ``raw_path`` as sent.
        """
        with self._lock:
            return [
                r
                for r in self._requests
                if (path_contains in r.path or path_contains in r.raw_path)
                and method in (None, r.method)
            ]

    # --- used by the HTTP app --------------------------------------------------------------

    def record_request(self, record: RequestRecord) -> None:
        """Log one API request (the app calls this once per request)."""
        with self._lock:
            self._requests.append(record)

    def roll_fault(self, endpoint: str) -> tuple[str | None, float, Faults]:
        """One decision per request: fault kind (or ``None``), latency, and the config."""
        with self._lock:
            injector = self._injector
            return injector.roll(endpoint), injector.latency(endpoint), injector.faults

    def list_page(self, query: ListQuery) -> JSON:
        """One cursor page of sessions, shaped by the page faults currently set."""
        with self._lock:
            sessions = list(self._sessions.values())
            faults = self._injector.faults
            return page(sessions, query, self.clock(), self.turn_duration, faults)

    def snapshot(self, session_id: str) -> tuple[JSON, tuple[int, str]]:
        """The session JSON and a token that changes whenever the session visibly changes.

        The token's second part is the real status (a raw ``status`` field may serve
        another): the server-sent events are named after it.
        """
        with self._lock:
            session = self._get(session_id)
            now = self.clock()
            return session.to_json(now), (session.version, session.status(now))

    def submit(
        self, session_id: str, body: Any, key: str | None, headers: Mapping[str, str]
    ) -> tuple[bool, bool]:
        """Validate and accept one batch; returns ``(replayed, lost)``.

        Raises:
            WireError: 404 unknown session, 400 invalid batch, 409 not pending or an
                idempotency key reused with a different request.
        """
        with self._lock:
            session = self._get(session_id)
            fingerprint = _fingerprint(session_id, body)
            if key is not None and key in self._keys:
                if self._keys[key] != fingerprint:
                    raise WireError(
                        409,
                        "This Idempotency-Key was already used with a different request "
                        "(another session or other events).",
                        code="idempotency_key_reused",
                        param="Idempotency-Key",
                    )
                return True, False
            events = check_shape(body)
            refuse_content(events, self._injector.faults.refuse_text)
            if session.error is not None:
                raise WireError(409, f"Session '{session_id}' has failed.", code="session_failed")
            check_pending(session_id, events, session.pending_keys())
            lost = self._injector.roll_lost()
            if key is not None:
                self._keys[key] = fingerprint
            self._accept(session, events, key, headers, lost)
            return False, lost

    def _accept(
        self,
        session: Session,
        events: list[JSON],
        key: str | None,
        headers: Mapping[str, str],
        lost: bool,
    ) -> None:
        now = self.clock()
        waited = waiting_type(session)
        answered = {k for k in map(answered_key, events) if k is not None}
        cancel = any(e["type"] == "agent.session.input.cancel" for e in events)
        messages = any(e["type"] == "agent.session.input.message" for e in events)
        session.accept(answered, now + self._injector.faults.apply_lag, cancel, messages)
        session.settle(now, self.turn_duration)
        if waited is not None and not session.pending_keys():
            self.webhooks.session_answered(session.id, waited)  # the ``stale`` fault's cue
        batch = AcceptedBatch(
            session.id, copy.deepcopy(events), key, dict(headers), time.time(), lost
        )
        self._batches.append(batch)

    def _announce(self, session: Session, before: set[ActionKey]) -> None:
        """Push ``agent.session.action_required`` if ``session`` now waits on new actions."""
        action_type = waiting_type(session)
        if session.error is None and action_type and session.pending_keys() - before:
            self.webhooks.session_waiting(session.id, action_type)

    def _get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise WireError(
                404,
                f"No session found with id '{session_id}'.",
                code="not_found",
                param="session_id",
            )
        session.settle(self.clock(), self.turn_duration)
        return session
