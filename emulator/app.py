"""The emulator's ASGI application: the APIs and ``/_emulator`` (the admin controls).

The APIs are the Agents sessions under ``/v1`` and the run-shaped Assistants protocol in
three flavours: ``/v1`` (OpenAI), ``/openai`` (Azure OpenAI) and ``/api/projects/{project}``
(Azure AI Foundry Agent Service). Chat Completions and Responses, answered by a scripted
model, are served under ``/v1``, ``/openai`` and ``/openai/v1`` (``emulator.chat``), and
the webhook endpoints API under ``/v1`` (``emulator.webhooks``).

The outermost layer implements the "lost 202" fault. An ASGI app cannot close a connection
without answering (a server answers 500 for an app that returns silently), so the layer
reaches for the server's transport and aborts it: the client sees the connection drop
after the batch was applied, exactly the ambiguity a real network produces.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from emulator.admin import Admin
from emulator.api import DROP_HEADER, Api, error_response
from emulator.chat.admin import ChatAdmin
from emulator.chat.routes import ChatApi
from emulator.paths import display_path
from emulator.runs.admin import RunsAdmin
from emulator.runs.routes import RunsApi
from emulator.state import EmulatorState
from emulator.webhooks.admin import WebhooksAdmin
from emulator.webhooks.routes import WebhooksApi
from emulator.wire import WireError

_DROP = DROP_HEADER.encode()


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    path = display_path(request.scope)
    message = {404: f"Invalid URL ({request.method} {path})"}.get(
        status, f"{request.method} is not allowed on {path}"
    )
    return error_response(WireError(status, message, code="unknown_url" if status == 404 else None))


def _abort_connection(send: Send) -> None:
    """Drop the TCP connection under a uvicorn request (its ``send`` is a bound method)."""
    transport: Any = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise RuntimeError("the lost-202 fault needs uvicorn (no transport found to abort)")
    transport.abort()


class EmulatorApp:
    """ASGI app over one :class:`EmulatorState`.

    Args:
        state: The emulator's world; a fresh one when omitted.
        api_key: The only bearer token accepted; ``None`` accepts any non-empty token.
        require_beta_header: Reject requests without ``OpenAI-Beta: agents=v1`` (sessions)
            or ``assistants=v2`` (the OpenAI flavour of runs).
    """

    def __init__(
        self,
        state: EmulatorState | None = None,
        *,
        api_key: str | None = None,
        require_beta_header: bool = True,
    ) -> None:
        self.state = state or EmulatorState()
        api = Api(self.state, api_key=api_key, require_beta_header=require_beta_header)
        #: The API endpoints; ``api.api_key`` may be changed while serving (a revoked key).
        self.api = api
        self.starlette = Starlette(
            routes=[
                *api.routes("/v1"),
                *RunsApi(api).routes(),
                *ChatApi(api).routes(),
                *WebhooksApi(api).routes("/v1"),
                *Admin(self.state).routes("/_emulator"),
                *RunsAdmin(self.state).routes("/_emulator"),
                *ChatAdmin(self.state.chat).routes("/_emulator/chat"),
                *WebhooksAdmin(self.state.webhooks).routes("/_emulator/webhooks"),
            ],
            exception_handlers={404: _http_error, 405: _http_error},
        )
        # No trailing-slash redirects: starlette builds them from the decoded path, which
        # mangles a hostile id, and an API answers an unknown URL with 404, not 307.
        self.starlette.router.redirect_slashes = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection, dropping it instead of sending a marked answer."""
        if scope["type"] != "http":
            await self.starlette(scope, receive, send)
            return
        dropped = False

        async def guarded_send(message: Message) -> None:
            nonlocal dropped
            if dropped:
                return
            if message["type"] == "http.response.start" and any(
                name == _DROP for name, _ in message.get("headers", [])
            ):
                dropped = True
                _abort_connection(send)
                return
            await send(message)

        await self.starlette(scope, receive, guarded_send)
        if dropped:
            # Let the server notice the closed transport before it checks the response.
            for _ in range(3):
                await asyncio.sleep(0)
