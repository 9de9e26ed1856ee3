"""The ``/v1`` webhook endpoints API, over ``EmulatorState.webhooks``.

Each route goes through :meth:`emulator.api.Api.endpoint` (error JSON, the request log)
with a bearer-only check: unlike the sessions API there is no beta header. The global
fault dice never apply here (their endpoint names are the sessions' and runs'); the
delivery faults shape the pushes, not these calls. Ids are matched on the raw path, as
everywhere in the emulator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from emulator.api import Api, check_bearer, json_body
from emulator.jsontext import JsonResponse
from emulator.paths import RawRoute, query_items
from emulator.webhooks.params import parse_list

Handler = Callable[[Request], Awaitable[Response]]
#: The name the request log and the (never matching) fault filter know these routes by.
ENDPOINT_NAME = "webhook_endpoints"


class WebhooksApi:
    """``/webhook_endpoints`` and ``/webhook_event_types``, sharing ``api``'s key and log."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.webhooks = api.state.webhooks

    def routes(self, prefix: str = "/v1") -> list[BaseRoute]:
        """The routes, under ``prefix``."""
        many, one = f"{prefix}/webhook_endpoints", f"{prefix}/webhook_endpoints/{{endpoint_id}}"
        table: list[tuple[str, str, Handler]] = [
            (many, "POST", self.create),
            (many, "GET", self.list_endpoints),
            (one, "GET", self.retrieve),
            (one, "POST", self.update),
            (one, "DELETE", self.delete),
            (f"{one}/rotate_secret", "POST", self.rotate_secret),
            (f"{one}/test", "POST", self.test),
            (f"{prefix}/webhook_event_types", "GET", self.event_types),
        ]
        return [
            RawRoute(
                path,
                self.api.endpoint(ENDPOINT_NAME, handler, self._authenticate),
                methods=[method],
            )
            for path, method, handler in table
        ]

    def _authenticate(self, request: Request) -> None:
        check_bearer(request, self.api.api_key)

    async def create(self, request: Request) -> Response:
        """``POST /webhook_endpoints``: the endpoint and, this once, its ``signing_secret``."""
        return JsonResponse(self.webhooks.create_endpoint(await json_body(request)))

    async def list_endpoints(self, request: Request) -> Response:
        """``GET /webhook_endpoints?after=&limit=``: a cursor page, newest first."""
        query = parse_list(query_items(request.scope))
        return JsonResponse(self.webhooks.list_endpoints(query))

    async def retrieve(self, request: Request) -> Response:
        """``GET /webhook_endpoints/{id}``."""
        return JsonResponse(self.webhooks.endpoint(request.path_params["endpoint_id"]))

    async def update(self, request: Request) -> Response:
        """``POST /webhook_endpoints/{id}``: change ``name``, ``url``, ``event_types``."""
        body = await json_body(request)
        return JsonResponse(self.webhooks.update_endpoint(request.path_params["endpoint_id"], body))

    async def delete(self, request: Request) -> Response:
        """``DELETE /webhook_endpoints/{id}``: the ``webhook_endpoint.deleted`` object."""
        return JsonResponse(self.webhooks.delete_endpoint(request.path_params["endpoint_id"]))

    async def rotate_secret(self, request: Request) -> Response:
        """``POST .../rotate_secret``: the endpoint with its new ``signing_secret``."""
        body = await _optional_body(request)
        endpoint_id = request.path_params["endpoint_id"]
        return JsonResponse(self.webhooks.rotate_secret(endpoint_id, body))

    async def test(self, request: Request) -> Response:
        """``POST .../test``: one sample event sent now; the receiver's status in the answer.

        The send blocks on the receiver, so it runs in a worker thread: the event loop keeps
        serving (the receiver may well call this emulator back while it answers).
        """
        body = await json_body(request)
        endpoint_id = request.path_params["endpoint_id"]
        result = await asyncio.to_thread(self.webhooks.test_endpoint, endpoint_id, body)
        return JsonResponse(result)

    async def event_types(self, request: Request) -> Response:
        """``GET /webhook_event_types``: every type an endpoint may subscribe to."""
        return JsonResponse(self.webhooks.event_types())


async def _optional_body(request: Request) -> object:
    """The JSON body, ``{}`` when empty (the SDK may send none for all-default options)."""
    raw = await request.body()
    return {} if not raw.strip() else await json_body(request)
