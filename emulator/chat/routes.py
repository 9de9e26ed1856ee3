"""The model endpoints' routes, once per surface, over ``EmulatorState.chat``.

Each goes through :meth:`emulator.api.Api.endpoint` (error JSON, the request log). A model
call checks its own credentials inside the handler, rather than in the wrapper, so that
every call, a 401 included, lands in the chat call records a test reads back. Global fault
dice never apply here (their endpoint names are the sessions' and runs'); the chat fault
knobs do (``emulator.chat.faults``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from emulator.api import Api, json_body
from emulator.chat.records import CHAT, RESPONSES, CallContext
from emulator.chat.surfaces import SURFACES, Surface
from emulator.jsontext import JsonResponse
from emulator.paths import RawRoute, display_path
from emulator.wire import WireError

SurfaceHandler = Callable[[Request, Surface], Awaitable[Response]]


def _checked_in_handler(request: Request) -> None:
    """The wrapper's credential check for model calls: none, the handler records its own."""


class ChatApi:
    """Chat Completions and Responses on every surface, sharing ``api``'s state and key."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.chat = api.state.chat

    def routes(self) -> list[BaseRoute]:
        """The routes of all surfaces."""
        return [route for surface in SURFACES for route in self.surface_routes(surface)]

    def surface_routes(self, surface: Surface) -> list[BaseRoute]:
        """One surface's routes."""
        responses = f"{surface.prefix}/responses"
        return [
            RawRoute(
                surface.chat_path,
                self._endpoint("chat", self.chat_completions, surface, _checked_in_handler),
                methods=["POST"],
            ),
            RawRoute(
                responses,
                self._endpoint("responses", self.create_response, surface, _checked_in_handler),
                methods=["POST"],
            ),
            RawRoute(
                f"{responses}/{{response_id}}",
                self._endpoint("responses", self.retrieve_response, surface),
                methods=["GET"],
            ),
        ]

    def _endpoint(
        self,
        name: str,
        handler: SurfaceHandler,
        surface: Surface,
        authenticate: Callable[[Request], None] | None = None,
    ) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return await handler(request, surface)

        def surface_auth(request: Request) -> None:
            surface.authenticate(request, self.api.api_key)

        return self.api.endpoint(name, serve, authenticate or surface_auth)

    async def chat_completions(self, request: Request, surface: Surface) -> Response:
        """``POST .../chat/completions``: the scripted model's ``chat.completion``."""
        deployment = request.path_params.get("deployment")
        context = CallContext(CHAT, surface.name, display_path(request.scope), deployment)
        return await self._model_call(request, surface, context)

    async def create_response(self, request: Request, surface: Surface) -> Response:
        """``POST .../responses``: the scripted model's ``response`` (stored unless told not)."""
        context = CallContext(RESPONSES, surface.name, display_path(request.scope))
        return await self._model_call(request, surface, context)

    async def retrieve_response(self, request: Request, surface: Surface) -> Response:
        """``GET .../responses/{response_id}``: a stored response; 404 when unknown."""
        return JsonResponse(self.chat.response(request.path_params["response_id"]))

    async def _model_call(
        self, request: Request, surface: Surface, context: CallContext
    ) -> Response:
        body: Any = None
        try:
            surface.authenticate(request, self.api.api_key)
            body = await json_body(request)
            await self._apply_faults(request)
            return JsonResponse(self.chat.answer(context, body))
        except WireError as error:
            outcome = getattr(request.state, "fault", None) or "refused"
            self.chat.record_failure(context, body, error, outcome)
            raise

    async def _apply_faults(self, request: Request) -> None:
        plan = self.chat.take_fault()
        if plan.delay:
            await asyncio.sleep(plan.delay)
        if plan.error is not None:
            request.state.fault = plan.outcome  # the request log's outcome
            raise plan.error
