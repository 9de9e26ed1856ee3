"""The run half of :class:`emulator.state.EmulatorState`: script and read back runs.

A mixin, so the state stays one object with one lock: tests and the admin routes call
``state.create_run(...)`` exactly like ``state.create_session(...)``. Every method takes
the state's lock and returns copies (plain JSON dicts).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from emulator.faults import FaultInjector
from emulator.runs.listing import PageQuery
from emulator.runs.store import DEFAULT_EXPIRES_IN, AcceptedSubmit, RunStore
from emulator.wire import JSON


class RunsState:
    """Threads, runs and submits; mixed into ``EmulatorState``, which sets the attributes."""

    _lock: threading.RLock
    _injector: FaultInjector
    _runs: RunStore
    clock: Callable[[], float]
    turn_duration: float

    def create_run(
        self,
        phases: Iterable[Iterable[Mapping[str, Any]]] = (),
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        assistant_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        tools: Iterable[Mapping[str, Any]] | None = None,
        expires_in: float | None = DEFAULT_EXPIRES_IN,
        status: str | None = None,
    ) -> JSON:
        """Add a run (and its thread, if new) scripted by ``phases``; returns the run JSON.

        Each phase is a list of calls ``{"name", "arguments", "id"}`` (``arguments`` a JSON
        string, or a value to dump; ``id`` optional): the run waits in ``requires_action``
        for phase 0, and each accepted submit moves it on after ``turn_duration``, to
        ``completed`` after the last. ``expires_in`` seconds from now it expires (``None``:
        never). ``status`` may start it ``queued``/``in_progress`` (phase 0 follows after
        ``turn_duration``) or already ``completed``/``failed``/``cancelled``/``expired``.
        Without phases it starts ``queued`` and completes after ``turn_duration``.
        """
        with self._lock:
            now = self.clock()
            run = self._runs.create(
                phases,
                now=now,
                turn_duration=self.turn_duration,
                thread_id=thread_id,
                run_id=run_id,
                assistant_id=assistant_id,
                metadata=metadata,
                tools=tools,
                expires_in=expires_in,
                status=status,
            )
            return run.to_json(now)

    def run(self, thread_id: str, run_id: str) -> JSON:
        """The run as ``GET /threads/{thread_id}/runs/{run_id}`` would show it now."""
        with self._lock:
            now = self.clock()
            return self._runs.get(thread_id, run_id, now).to_json(now)

    def runs(self) -> list[JSON]:
        """Every run, oldest first: ``{"thread_id", "run_id", "status"}``."""
        with self._lock:
            now = self.clock()
            return [
                {"thread_id": r.thread_id, "run_id": r.id, "status": r.status(now)}
                for r in self._runs.all(now)
            ]

    def cancel_run(self, thread_id: str, run_id: str) -> JSON:
        """Cancel a run now (as ``POST .../cancel`` does); 400 when it is terminal."""
        with self._lock:
            now = self.clock()
            run = self._runs.get(thread_id, run_id, now)
            run.cancel(now)
            return run.to_json(now)

    def expire_run(self, thread_id: str, run_id: str) -> JSON:
        """Make a run expire now; 400 when it is terminal."""
        with self._lock:
            now = self.clock()
            run = self._runs.get(thread_id, run_id, now)
            run.expire(now)
            return run.to_json(now)

    def fail_run(self, thread_id: str, run_id: str) -> JSON:
        """Fail a run now (``last_error`` a ``server_error``); 400 when it is terminal."""
        with self._lock:
            now = self.clock()
            run = self._runs.get(thread_id, run_id, now)
            run.fail(now)
            return run.to_json(now)

    def submits(self, thread_id: str | None = None, run_id: str | None = None) -> list[JSON]:
        """Every accepted tool-output submit, oldest first (see ``AcceptedSubmit.to_json``)."""
        with self._lock:
            return self._runs.submits(thread_id, run_id)

    def run_page(self, thread_id: str, query: PageQuery, *, null_last_id: bool = False) -> JSON:
        """One cursor page of a thread's runs (``null_last_id``: Foundry's last page)."""
        with self._lock:
            return self._runs.run_page(thread_id, query, self.clock(), null_last_id=null_last_id)

    def thread_page(self, query: PageQuery, *, null_last_id: bool = True) -> JSON:
        """One cursor page of threads (Foundry only)."""
        with self._lock:
            return self._runs.thread_page(query, null_last_id=null_last_id)

    def submit_tool_outputs(
        self, thread_id: str, run_id: str, body: Any, headers: Mapping[str, str], flavour: str
    ) -> tuple[JSON, bool]:
        """Validate and apply one submit; returns ``(run JSON, lost)``.

        Raises:
            WireError: 404 unknown run, 400 invalid body, wrong status or wrong outputs.
        """
        with self._lock:
            now = self.clock()
            run = self._runs.get(thread_id, run_id, now)
            phase, outputs = self._runs.submit(
                run,
                body,
                now=now,
                turn_duration=self.turn_duration,
                refuse_text=self._injector.faults.refuse_text,
            )
            lost = self._injector.roll_lost("submit_outputs")
            submit = AcceptedSubmit(
                thread_id,
                run_id,
                phase,
                copy.deepcopy(outputs),
                time.time(),
                dict(headers),
                lost,
                flavour,
            )
            self._runs.record(submit)
            return run.to_json(now), lost
