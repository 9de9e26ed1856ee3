"""Admin routes for runs under ``/_emulator``: seed runs, push them along, read submits.

They mirror the run methods of ``EmulatorState`` (``create_run``, ``run``, ``runs``,
``cancel_run``, ``expire_run``, ``fail_run``, ``submits``). Like every admin route they
need no token and are never faulted; thread and run ids match on the raw path.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from emulator.admin import admin_body, admin_endpoint
from emulator.jsontext import JsonResponse
from emulator.paths import RawRoute, query_items
from emulator.state import EmulatorState
from emulator.wire import JSON

Handler = Callable[[Request], Awaitable[Response]]
#: The keys of a ``POST /_emulator/runs`` body: ``create_run``'s arguments.
_CREATE_KEYS = frozenset(
    {"phases", "thread_id", "run_id", "assistant_id", "metadata", "tools", "expires_in", "status"}
)


class RunsAdmin:
    """The run-scripting ``/_emulator`` endpoints over one :class:`EmulatorState`."""

    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    def routes(self, prefix: str = "/_emulator") -> list[BaseRoute]:
        """The routes, under ``prefix``."""
        one = "/runs/{thread_id}/{run_id}"
        table: list[tuple[str, str, Handler]] = [
            ("/runs", "POST", self.create_run),
            ("/runs/bulk", "POST", self.create_runs),
            ("/runs", "GET", self.list_runs),
            (one, "GET", self.get_run),
            (f"{one}/cancel", "POST", self.cancel_run),
            (f"{one}/expire", "POST", self.expire_run),
            (f"{one}/fail", "POST", self.fail_run),
            ("/submits", "GET", self.submits),
        ]
        return [
            RawRoute(prefix + path, admin_endpoint(handler), methods=[method])
            for path, method, handler in table
        ]

    async def create_run(self, request: Request) -> Response:
        """Create a run: ``{"phases": [[call, ...], ...], ...}``, as ``create_run`` takes."""
        return JsonResponse(self._create(await admin_body(request)), status_code=201)

    async def create_runs(self, request: Request) -> Response:
        """Create many runs in one request: ``{"runs": [<POST /runs body>, ...]}``.

        Benchmarks seed hundreds of runs; one request each would time the seeding, not the
        system under test. The runs are created on the event loop without yielding, so no
        API request sees only some of them; ``data`` lists ``{"thread_id", "run_id"}`` in
        order, and ``at`` is the server time once all exist (when they became pending).
        """
        specs = (await admin_body(request)).get("runs", [])
        if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
            raise ValueError("'runs' must be a list of run bodies")
        created = [self._create(spec) for spec in specs]
        ids = [{"thread_id": r["thread_id"], "run_id": r["id"]} for r in created]
        return JsonResponse({"data": ids, "at": time.time()}, status_code=201)

    def _create(self, body: dict[str, Any]) -> JSON:
        """One run from a ``POST /runs`` body (``ValueError`` for an unknown key)."""
        unknown = sorted(set(body) - _CREATE_KEYS)
        if unknown:
            raise ValueError(f"unknown keys {unknown}; known: {sorted(_CREATE_KEYS)}")
        options = {k: v for k, v in body.items() if k != "phases"}
        return self.state.create_run(body.get("phases", []), **options)

    async def list_runs(self, request: Request) -> Response:
        """Every run, oldest first: ``{"data": [{"thread_id", "run_id", "status"}]}``."""
        return JsonResponse({"data": self.state.runs()})

    async def get_run(self, request: Request) -> Response:
        """A run, bypassing auth and faults."""
        params = request.path_params
        return JsonResponse(self.state.run(params["thread_id"], params["run_id"]))

    async def cancel_run(self, request: Request) -> Response:
        """Cancel a run now."""
        params = request.path_params
        return JsonResponse(self.state.cancel_run(params["thread_id"], params["run_id"]))

    async def expire_run(self, request: Request) -> Response:
        """Make a run expire now."""
        params = request.path_params
        return JsonResponse(self.state.expire_run(params["thread_id"], params["run_id"]))

    async def fail_run(self, request: Request) -> Response:
        """Fail a run now."""
        params = request.path_params
        return JsonResponse(self.state.fail_run(params["thread_id"], params["run_id"]))

    async def submits(self, request: Request) -> Response:
        """Accepted submits, oldest first, optionally of one ``thread_id`` and/or ``run_id``.

        Each has ``received_at``, the server time it was accepted. ``offset=N`` skips the
        first N, so a watcher waiting for new submits reads each one once.
        """
        params = dict(query_items(request.scope))
        offset = int(params.get("offset", "0"))
        if offset < 0:
            raise ValueError("offset must be >= 0")
        chosen = self.state.submits(params.get("thread_id"), params.get("run_id"))
        return JsonResponse({"data": chosen[offset:]})
