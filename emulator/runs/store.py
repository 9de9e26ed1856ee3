"""The run store: threads, runs and accepted submits; no locking here, the state locks.

Threads exist only as the holders of runs: creating a run on a new ``thread_id`` creates the
thread. Every read settles the runs it touches first (``Run.settle``), so what time has done
(a finished turn, an expiry) is visible to everyone the same way.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from emulator.runs.calls import function_tools, parse_phases
from emulator.runs.listing import PageQuery, cursor_page
from emulator.runs.model import Run, invalid_state
from emulator.runs.outputs import check_answers, check_shape, refuse_content
from emulator.wire import JSON, WireError, new_id

#: Seconds a run lives unless told otherwise: the API's ten minutes.
DEFAULT_EXPIRES_IN = 600.0


@dataclass(frozen=True)
class AcceptedSubmit:
    """One accepted ``submit_tool_outputs`` request, as the emulator received it."""

    thread_id: str
    run_id: str
    phase: int
    tool_outputs: list[JSON]
    received_at: float
    headers: dict[str, str]
    lost: bool
    flavour: str

    def to_json(self) -> JSON:
        """The admin API's form."""
        return {
            "thread_id": self.thread_id,
            "run_id": self.run_id,
            "phase": self.phase,
            "tool_outputs": copy.deepcopy(self.tool_outputs),
            "received_at": self.received_at,
            "headers": dict(self.headers),
            "lost": self.lost,
            "flavour": self.flavour,
        }


@dataclass(frozen=True)
class Thread:
    """A thread: the id and creation time its runs share."""

    id: str
    created_at: int

    def to_json(self) -> JSON:
        """The ``thread`` object (``azure.ai.agents.models.AgentThread``'s fields)."""
        return {
            "id": self.id,
            "object": "thread",
            "created_at": self.created_at,
            "metadata": {},
            "tool_resources": {},
        }


def _metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError("'metadata' must map strings to strings")
    return dict(metadata)


def _tools(tools: Iterable[Mapping[str, Any]] | None, phases: list[list[JSON]]) -> list[JSON]:
    if tools is None:
        return function_tools(phases)
    listed = list(tools)
    if not all(isinstance(t, Mapping) and "type" in t for t in listed):
        raise ValueError("'tools' must be a list of tool definitions, each with a 'type'")
    return [copy.deepcopy(dict(t)) for t in listed]


def _expiry(expires_in: float | None, now: float) -> float | None:
    if expires_in is None:
        return None
    if not isinstance(expires_in, (int, float)) or isinstance(expires_in, bool) or expires_in < 0:
        raise ValueError("'expires_in' must be null or a number of seconds >= 0")
    return now + float(expires_in)


def _not_found(thread_id: str, run_id: str | None = None) -> WireError:
    if run_id is None:
        return WireError(
            404, f"No thread found with id '{thread_id}'.", code="not_found", param="thread_id"
        )
    return WireError(
        404,
        f"No run found with id '{run_id}' in thread '{thread_id}'.",
        code="not_found",
        param="run_id",
    )


class RunStore:
    """Every thread, run and accepted submit of one emulator."""

    def __init__(self) -> None:
        self._threads: dict[str, Thread] = {}
        self._runs: dict[tuple[str, str], Run] = {}
        self._submits: list[AcceptedSubmit] = []
        self._seq = 0

    def clear(self) -> None:
        """Forget threads, runs and submits."""
        self._threads.clear()
        self._runs.clear()
        self._submits.clear()

    # --- runs --------------------------------------------------------------------------------

    def create(
        self,
        phases: Iterable[Iterable[Mapping[str, Any]]],
        *,
        now: float,
        turn_duration: float,
        thread_id: str | None = None,
        run_id: str | None = None,
        assistant_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        tools: Iterable[Mapping[str, Any]] | None = None,
        expires_in: float | None = DEFAULT_EXPIRES_IN,
        status: str | None = None,
    ) -> Run:
        """Add a run (and its thread, if new); see ``EmulatorState.create_run``."""
        parsed = parse_phases(phases)
        for name, value in (("thread_id", thread_id), ("run_id", run_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name!r} must be a non-empty string")
        tid, rid = thread_id or new_id("thread"), run_id or new_id("run")
        if (tid, rid) in self._runs:
            raise ValueError(f"run {rid!r} exists already in thread {tid!r}")
        if status == "requires_action" and not parsed:
            raise ValueError("a run in requires_action needs at least one phase")
        run = Run(
            id=rid,
            thread_id=tid,
            seq=self._seq + 1,
            assistant_id=assistant_id or "asst_emulated",
            metadata=_metadata(metadata),
            tools=_tools(tools, parsed),
            phases=parsed,
            created=now,
            offset=time.time() - now,
            expires=_expiry(expires_in, now),
            started=now,
        )
        run.force(status or ("requires_action" if parsed else "queued"), now, turn_duration)
        self._seq += 1
        self._threads.setdefault(tid, Thread(tid, int(time.time())))
        self._runs[(tid, rid)] = run
        return run

    def get(self, thread_id: str, run_id: str, now: float) -> Run:
        """The run, settled; 404 when unknown."""
        run = self._runs.get((thread_id, run_id))
        if run is None:
            raise _not_found(thread_id, run_id)
        run.settle(now)
        return run

    def all(self, now: float) -> list[Run]:
        """Every run, settled, oldest first."""
        runs = sorted(self._runs.values(), key=lambda r: r.seq)
        for run in runs:
            run.settle(now)
        return runs

    def run_page(self, thread_id: str, query: PageQuery, now: float, *, null_last_id: bool) -> JSON:
        """One cursor page of a thread's runs; 404 when the thread is unknown."""
        if thread_id not in self._threads:
            raise _not_found(thread_id)
        runs = [r for r in self.all(now) if r.thread_id == thread_id]
        items = [(r.id, r.to_json(now)) for r in runs]
        return cursor_page(items, query, noun="run", null_last_id=null_last_id)

    def thread_page(self, query: PageQuery, *, null_last_id: bool) -> JSON:
        """One cursor page of threads, by creation."""
        items = [(t.id, t.to_json()) for t in self._threads.values()]
        return cursor_page(items, query, noun="thread", null_last_id=null_last_id)

    # --- submits -----------------------------------------------------------------------------

    def submit(
        self,
        run: Run,
        body: Any,
        *,
        now: float,
        turn_duration: float,
        refuse_text: str | None,
    ) -> tuple[int, list[JSON]]:
        """Validate a submit against ``run`` (settled) and apply it; ``(phase, outputs)``.

        Raises:
            WireError: 400 for a malformed body, a run not in ``requires_action``, or
                outputs that are not exactly the current phase's calls.
        """
        outputs = check_shape(body)
        refuse_content(outputs, refuse_text)
        status = run.status(now)
        if status != "requires_action":
            raise invalid_state(f'Runs in status "{status}" do not accept tool outputs.')
        check_answers(run.id, outputs, [call["id"] for call in run.pending_calls()])
        phase = run.phase
        run.answer(now, turn_duration)
        return phase, outputs

    def record(self, submit: AcceptedSubmit) -> None:
        """Keep an accepted submit."""
        self._submits.append(submit)

    def submits(self, thread_id: str | None = None, run_id: str | None = None) -> list[JSON]:
        """Every accepted submit, oldest first, optionally of one thread and/or run."""
        return [
            s.to_json()
            for s in self._submits
            if thread_id in (None, s.thread_id) and run_id in (None, s.run_id)
        ]
