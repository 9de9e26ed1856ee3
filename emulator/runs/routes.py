"""The run-shaped API's routes, once per flavour, over the one run store of the state.

Each handler goes through :meth:`emulator.api.Api.endpoint` (fault dice, error JSON, the
request log) with the flavour's own credential check. Routes match the raw path, so thread
and run ids may hold any character, percent-encoded as for the sessions API.

Answers carrying a run also carry ``openai-poll-after-ms`` (a quarter of the state's
``turn_duration``), which the ``openai`` SDK's ``*_and_poll`` helpers sleep by.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from emulator.api import DROP_HEADER, Api, json_body, redacted_headers
from emulator.jsontext import JsonResponse
from emulator.paths import RawRoute, query_items
from emulator.runs.flavours import FLAVOURS, Flavour
from emulator.runs.listing import parse_page_query
from emulator.wire import JSON

FlavourHandler = Callable[[Request, Flavour], Awaitable[Response]]


class RunsApi:
    """The threads-and-runs endpoints of every flavour, sharing ``api``'s state and key."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.state = api.state

    def _settings(self) -> tuple[str | None, bool]:
        return self.api.api_key, self.api.require_beta_header

    def routes(self) -> list[BaseRoute]:
        """The routes of all three flavours."""
        return [route for flavour in FLAVOURS for route in self.flavour_routes(flavour)]

    def flavour_routes(self, flavour: Flavour) -> list[BaseRoute]:
        """One flavour's routes, under its prefix."""
        runs = f"{flavour.prefix}/threads/{{thread_id}}/runs"
        one = f"{runs}/{{run_id}}"
        table: list[tuple[str, str, str, FlavourHandler]] = [
            (runs, "GET", "runs", self.list_runs),
            (one, "GET", "runs", self.retrieve),
            (f"{one}/submit_tool_outputs", "POST", "submit_outputs", self.submit_tool_outputs),
            (f"{one}/cancel", "POST", "cancel", self.cancel),
        ]
        if flavour.lists_threads:
            table.append((f"{flavour.prefix}/threads", "GET", "threads", self.list_threads))
        return [
            RawRoute(path, self._endpoint(name, handler, flavour), methods=[method])
            for path, method, name, handler in table
        ]

    def _endpoint(
        self, name: str, handler: FlavourHandler, flavour: Flavour
    ) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return await handler(request, flavour)

        def authenticate(request: Request) -> None:
            flavour.authenticate(request, self._settings)

        return self.api.endpoint(name, serve, authenticate)

    def _run_answer(self, run: JSON, *, lost: bool = False) -> Response:
        poll_ms = max(1, math.ceil(self.state.turn_duration * 250))
        headers = {"openai-poll-after-ms": str(poll_ms)}
        if lost:
            headers[DROP_HEADER] = "1"
        return JsonResponse(run, headers=headers)

    async def retrieve(self, request: Request, flavour: Flavour) -> Response:
        """``GET .../threads/{thread_id}/runs/{run_id}``."""
        params = request.path_params
        return self._run_answer(self.state.run(params["thread_id"], params["run_id"]))

    async def list_runs(self, request: Request, flavour: Flavour) -> Response:
        """``GET .../threads/{thread_id}/runs``: one cursor page, oldest or newest first."""
        query = parse_page_query(query_items(request.scope))
        page = self.state.run_page(
            request.path_params["thread_id"], query, null_last_id=flavour.null_last_id
        )
        return JsonResponse(page)

    async def list_threads(self, request: Request, flavour: Flavour) -> Response:
        """``GET .../threads`` (Foundry): one cursor page of threads."""
        query = parse_page_query(query_items(request.scope))
        return JsonResponse(self.state.thread_page(query, null_last_id=flavour.null_last_id))

    async def submit_tool_outputs(self, request: Request, flavour: Flavour) -> Response:
        """``POST .../submit_tool_outputs``: 200 with the run (``queued``), or an error."""
        body = await json_body(request)
        params = request.path_params
        run, lost = self.state.submit_tool_outputs(
            params["thread_id"],
            params["run_id"],
            body,
            redacted_headers(request.headers),
            flavour.name,
        )
        request.state.outcome = "lost" if lost else "accepted"
        delay = self.state.faults.answer_delay
        if delay:
            await asyncio.sleep(delay)
        return self._run_answer(run, lost=lost)

    async def cancel(self, request: Request, flavour: Flavour) -> Response:
        """``POST .../cancel``: the run, now ``cancelled``; 400 when it is terminal."""
        params = request.path_params
        return self._run_answer(self.state.cancel_run(params["thread_id"], params["run_id"]))
