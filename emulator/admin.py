"""Admin routes under ``/_emulator``: script a running emulator from another process.

They mirror the Python API of :class:`EmulatorState` so a demo script or an end-to-end test
can seed sessions, set faults and read back what was received. They need no token and
never inject faults: they are the operator's controls, not part of the emulated API. Like
the API's, their session ids are matched on the raw path, so any id can be addressed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from emulator.faults import Faults
from emulator.jsontext import JsonResponse
from emulator.paths import RawRoute, query_items
from emulator.state import EmulatorState
from emulator.wire import JSON, WireError, function_call, new_id

Handler = Callable[[Request], Awaitable[Response]]
_SETTINGS = ("turn_duration", "stream_lifetime")


def _actions(body: JSON) -> list[JSON]:
    """``required_actions`` verbatim plus ``function_calls`` given as builder arguments."""
    actions = list(body.get("required_actions", []))
    for call in body.get("function_calls", []):
        actions.append(function_call(**call))
    return actions


def admin_endpoint(handler: Handler) -> Handler:
    """Wrap an admin ``handler``: errors become JSON (a bad request, ``ValueError``: 400)."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except WireError as error:
            return JsonResponse(error.body(), status_code=error.status)
        except (ValueError, TypeError, KeyError) as error:
            bad = WireError(400, f"Invalid admin request: {error}", code="invalid_admin_request")
            return JsonResponse(bad.body(), status_code=400)

    return run


class Admin:
    """The ``/_emulator`` endpoints over one :class:`EmulatorState`."""

    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    def routes(self, prefix: str = "/_emulator") -> list[BaseRoute]:
        """The routes, under ``prefix``."""
        get, put, post = ["GET"], ["PUT"], ["POST"]
        table = [
            ("/reset", self.reset, post),
            ("/faults", self.get_faults, get),
            ("/faults", self.put_faults, put),
            ("/settings", self.get_settings, get),
            ("/settings", self.put_settings, put),
            ("/sessions", self.create_session, post),
            ("/sessions/bulk", self.create_sessions, post),
            ("/sessions", self.list_ids, get),
            ("/sessions/{session_id}", self.get_session, get),
            ("/sessions/{session_id}/actions", self.add_actions, post),
            ("/batches", self.batches, get),
            ("/requests", self.requests, get),
        ]
        return [
            RawRoute(prefix + path, admin_endpoint(handler), methods=methods)
            for path, handler, methods in table
        ]

    async def reset(self, request: Request) -> Response:
        """Forget everything: sessions, runs, recordings, keys and faults."""
        self.state.reset()
        return JsonResponse({"reset": True})

    async def get_faults(self, request: Request) -> Response:
        """The current fault knobs."""
        return JsonResponse(self.state.faults.to_json())

    async def put_faults(self, request: Request) -> Response:
        """Replace all knobs (omitted ones go back to their defaults) and reseed."""
        faults = self.state.set_faults(Faults.from_json(await admin_body(request)))
        return JsonResponse(faults.to_json())

    async def get_settings(self, request: Request) -> Response:
        """``turn_duration`` and ``stream_lifetime``."""
        return JsonResponse({name: getattr(self.state, name) for name in _SETTINGS})

    async def put_settings(self, request: Request) -> Response:
        """Change ``turn_duration`` and/or ``stream_lifetime`` (seconds)."""
        body = await admin_body(request)
        unknown = set(body) - set(_SETTINGS)
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")
        for name, value in body.items():
            setattr(self.state, name, float(value))
        return await self.get_settings(request)

    async def create_session(self, request: Request) -> Response:
        """Create a session: ``EmulatorState.create_session`` options plus ``function_calls``.

        ``raw`` and ``raw_actions`` are served verbatim (see ``EmulatorState.create_session``).
        """
        body = await admin_body(request)
        return JsonResponse(
            self.state.create_session(_actions(body), **_options(body)), status_code=201
        )

    async def create_sessions(self, request: Request) -> Response:
        """Create many sessions in one request: ``{"sessions": [<create_session body>...]}``.

        Benchmarks seed thousands of sessions; one request per session would make seeding,
        not the system under test, the slow part. The sessions are created on the event
        loop without yielding, so no API request sees only some of them; ``at`` is the
        server time once all exist (the moment they became pending).
        """
        specs = (await admin_body(request)).get("sessions", [])
        if not isinstance(specs, list):
            raise ValueError("'sessions' must be a list of session bodies")
        ids = []
        for spec in specs:
            # The real id, chosen here: a raw "id" field changes only the served one.
            options = _options(spec) | {"session_id": spec.get("session_id") or new_id("sess")}
            self.state.create_session(_actions(spec), **options)
            ids.append(options["session_id"])
        return JsonResponse({"data": ids, "at": time.time()}, status_code=201)

    async def list_ids(self, request: Request) -> Response:
        """Every session id, oldest first."""
        return JsonResponse({"data": self.state.session_ids()})

    async def get_session(self, request: Request) -> Response:
        """A session, bypassing auth and faults."""
        return JsonResponse(self.state.session(request.path_params["session_id"]))

    async def add_actions(self, request: Request) -> Response:
        """Append ``required_actions``, ``function_calls`` and/or ``raw_actions`` to a session."""
        body = await admin_body(request)
        session = self.state.add_actions(
            request.path_params["session_id"], _actions(body), body.get("raw_actions", ())
        )
        return JsonResponse(session)

    async def batches(self, request: Request) -> Response:
        """Accepted batches with their headers, optionally of one ``session_id``.

        ``offset=N`` skips the first N (in acceptance order), so a watcher polling for new
        batches reads each one once instead of the whole growing list every time.
        """
        params = dict(query_items(request.scope))
        session_id = params.get("session_id")
        offset = int(params.get("offset", "0"))
        if offset < 0:
            raise ValueError("offset must be >= 0")
        chosen = self.state.batches(session_id)[offset:]
        return JsonResponse({"data": [b.to_json() for b in chosen]})

    async def requests(self, request: Request) -> Response:
        """The API request log, optionally filtered by ``path`` substring and ``method``."""
        params = dict(query_items(request.scope))
        records = self.state.requests(params.get("path", ""), params.get("method"))
        return JsonResponse({"data": [r.to_json() for r in records]})


def _options(body: JSON) -> dict[str, Any]:
    """The ``EmulatorState.create_session`` keyword options present in a session body."""
    names = ("session_id", "agent_id", "metadata", "tools", "status", "error", "raw", "raw_actions")
    return {k: body[k] for k in names if k in body}


async def admin_body(request: Request) -> Any:
    """The request's JSON object body (``{}`` when empty); ``ValueError`` otherwise."""
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except RecursionError:
        raise ValueError("the body nests too deep to parse") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body
