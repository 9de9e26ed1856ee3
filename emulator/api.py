"""The ``/v1`` routes: the Agents API sessions endpoints, with auth, faults and a request log.

Every endpoint goes through :meth:`Api.endpoint`, which checks the bearer token and the
``OpenAI-Beta`` header, rolls the fault dice, renders :class:`WireError` as the OpenAI
error JSON and records the request, so each handler holds only its own logic. Routes match
the raw path (``emulator.paths``), so a session id may hold any character. The run-shaped
API (``emulator.runs.routes``) wraps its handlers the same way, with its own credential
checks per flavour.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute

from emulator.faults import Faults
from emulator.jsontext import JsonResponse
from emulator.pages import garbage_body
from emulator.paths import RawRoute, display_path, query_items, raw_path
from emulator.sse import session_events
from emulator.state import EmulatorState, RequestRecord
from emulator.validation import parse_list_query
from emulator.wire import WireError

#: A handler's answer carrying this header loses its 202: the app drops the connection.
DROP_HEADER = "x-emulator-drop-connection"
Handler = Callable[[Request], Awaitable[Response]]
#: Checks a request's credentials and headers, raising :class:`WireError` to refuse it.
Authenticator = Callable[[Request], None]


def error_response(error: WireError) -> JsonResponse:
    """The OpenAI error JSON with the error's status and headers."""
    return JsonResponse(error.body(), status_code=error.status, headers=error.headers)


def redacted_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Request headers safe to keep and show: no token or ``api-key`` is ever recorded."""
    safe = {k.lower(): v for k, v in headers.items()}
    if "authorization" in safe:
        scheme = safe["authorization"].partition(" ")[0]
        safe["authorization"] = f"{scheme} <redacted>"
    if "api-key" in safe:
        safe["api-key"] = "<redacted>"
    return safe


def check_bearer(request: Request, api_key: str | None) -> None:
    """401 unless ``Authorization: Bearer <token>`` holds ``api_key`` (any token if ``None``)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise WireError(
            401,
            "You didn't provide an API key. Send it in an Authorization header using "
            "Bearer auth (Authorization: Bearer YOUR_KEY).",
        )
    if api_key is not None and token.strip() != api_key:
        raise WireError(401, "Incorrect API key provided.", code="invalid_api_key")


def check_beta(request: Request, feature: str, api_name: str) -> None:
    """400 unless the ``OpenAI-Beta`` header names ``feature`` (e.g. ``agents=v1``)."""
    if feature not in request.headers.get("openai-beta", ""):
        raise WireError(
            400,
            f"The {api_name} API is in beta: send the header 'OpenAI-Beta: {feature}'.",
            code="missing_beta_header",
            param="OpenAI-Beta",
        )


def _fault_error(kind: str, faults: Faults) -> WireError:
    if kind == "throttle":
        return WireError(
            429,
            "Rate limit reached for requests (emulated). Please try again later.",
            type="requests",
            code="rate_limit_exceeded",
            headers=faults.retry_after_headers(),
        )
    return WireError(
        500,
        "The server had an error while processing your request. Sorry about that! (emulated)",
        type="server_error",
    )


class Api:
    """The ``/v1`` endpoints over one :class:`EmulatorState`.

    Args:
        state: The world the endpoints read and change.
        api_key: The only bearer token accepted; ``None`` accepts any non-empty token.
        require_beta_header: Reject requests without ``OpenAI-Beta: agents=v1`` (400), as
            a beta API does; catches a client that forgets the header.
    """

    def __init__(
        self, state: EmulatorState, *, api_key: str | None = None, require_beta_header: bool = True
    ) -> None:
        self.state = state
        self.api_key = api_key
        self.require_beta_header = require_beta_header

    def routes(self, prefix: str = "/v1") -> list[BaseRoute]:
        """The routes, under ``prefix``."""
        sessions, one = f"{prefix}/agents/sessions", f"{prefix}/agents/sessions/{{session_id}}"
        return [
            RawRoute(sessions, self.endpoint("list", self.list_sessions), methods=["GET"]),
            RawRoute(one, self.endpoint("retrieve", self.retrieve), methods=["GET"]),
            RawRoute(
                f"{one}/events", self.endpoint("events", self.create_events), methods=["POST"]
            ),
            RawRoute(f"{one}/events", self.endpoint("stream", self.stream_events), methods=["GET"]),
        ]

    def endpoint(
        self, name: str, handler: Handler, authenticate: Authenticator | None = None
    ) -> Handler:
        """Wrap ``handler`` with auth, faults, error rendering and the request log.

        ``authenticate`` checks the request's credentials and headers before the fault dice
        roll (raising :class:`WireError`); the sessions API's bearer-and-beta check when
        omitted. ``name`` is the endpoint the fault knobs' ``endpoints`` filter names.
        """
        check = authenticate or self._authenticate

        async def run(request: Request) -> Response:
            request.state.outcome = "ok"
            try:
                response = await self._guarded(name, handler, request, check)
            except ClientDisconnect:  # the client died mid-request: nothing was applied
                response = Response(status_code=499)
                request.state.outcome = "disconnected"
            except WireError as error:
                response = error_response(error)
                request.state.outcome = getattr(request.state, "fault", None) or "rejected"
            self.state.record_request(
                RequestRecord(
                    method=request.method,
                    path=display_path(request.scope),
                    raw_path=raw_path(request.scope).decode("latin-1"),
                    query=request.url.query,
                    headers=redacted_headers(request.headers),
                    status=response.status_code,
                    outcome=request.state.outcome,
                )
            )
            return response

        return run

    async def _guarded(
        self, name: str, handler: Handler, request: Request, authenticate: Authenticator
    ) -> Response:
        authenticate(request)
        fault, latency, faults = self.state.roll_fault(name)
        if latency:
            await request.body()  # cached for the handler; the next receive is a disconnect
            await asyncio.sleep(latency)
            if await request.is_disconnected():  # the client gave up: apply nothing
                raise ClientDisconnect
        if fault is not None:
            request.state.fault = fault
            raise _fault_error(fault, faults)
        return await handler(request)

    def _authenticate(self, request: Request) -> None:
        check_bearer(request, self.api_key)
        if self.require_beta_header:
            check_beta(request, "agents=v1", "Agents")

    async def list_sessions(self, request: Request) -> Response:
        """``GET /agents/sessions``: one cursor page, or the ``list_garbage`` fault's body."""
        query = parse_list_query(query_items(request.scope))
        listed = self.state.list_page(query)
        garbage = self.state.faults.list_garbage
        if garbage is not None:
            return Response(garbage_body(garbage, listed), media_type="application/json")
        return JsonResponse(listed)

    async def retrieve(self, request: Request) -> Response:
        """``GET /agents/sessions/{id}``."""
        return JsonResponse(self.state.session(request.path_params["session_id"]))

    async def create_events(self, request: Request) -> Response:
        """``POST /agents/sessions/{id}/events``: 202 and no body, or an error."""
        body = await json_body(request)
        key = request.headers.get("idempotency-key") or None
        replayed, lost = self.state.submit(
            request.path_params["session_id"], body, key, redacted_headers(request.headers)
        )
        request.state.outcome = "replayed" if replayed else "lost" if lost else "accepted"
        delay = self.state.faults.answer_delay
        if delay and not replayed:
            await asyncio.sleep(delay)
        return Response(status_code=202, headers={DROP_HEADER: "1"} if lost else None)

    async def stream_events(self, request: Request) -> Response:
        """``GET /agents/sessions/{id}/events``: server-sent events."""
        session_id = request.path_params["session_id"]
        self.state.session(session_id)  # a 404 must be an answer, not a broken stream
        obfuscate = dict(query_items(request.scope)).get("include_obfuscation", "true") != "false"
        request.state.outcome = "stream"
        return StreamingResponse(
            session_events(self.state, session_id, obfuscate=obfuscate),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )


async def json_body(request: Request) -> Any:
    """The request's JSON body; 400 ``invalid_json`` when it does not parse."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # nesting too deep for the parser is invalid too
        raise WireError(
            400,
            "We could not parse the JSON body of your request.",
            code="invalid_json",
        ) from None
