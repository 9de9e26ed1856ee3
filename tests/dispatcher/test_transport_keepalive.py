"""The API client drops an idle connection before a server with a 5 s keep-alive closes it.

Servers commonly close idle connections after 5 s (uvicorn's and Node's default); httpx's
pool kept them 5 s too, so a request sent on a connection idle that long could meet the
server closing it and fail with a reset, costing a retry and its back-off. The client now
keeps idle connections for less: the request after such a pause opens a new one, while
requests in quick succession still share theirs. A real uvicorn server with its defaults
reports the client's port of each request.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dispatcher.transport import KEEPALIVE_EXPIRY, Transport

pytestmark = pytest.mark.slow  # waits out a server's keep-alive: make test-fast leaves it out

#: uvicorn's default keep-alive, which the server below keeps.
SERVER_KEEP_ALIVE = 5.0


def _port_of(request: Request) -> JSONResponse:
    assert request.client is not None
    return JSONResponse({"port": request.client.port})


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = Starlette(routes=[Route("/port", _port_of)])
    config = uvicorn.Config(app, log_level="warning")
    assert config.timeout_keep_alive == SERVER_KEEP_ALIVE  # the default this guards against
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not served.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    served.should_exit = True
    thread.join(10)


def _port(transport: Transport) -> int:
    response, _ = transport.request("GET", "/port")
    return int(response.json()["port"])


def test_a_request_after_a_pause_near_the_servers_keep_alive_opens_a_new_connection(
    server: str,
) -> None:
    assert KEEPALIVE_EXPIRY < SERVER_KEEP_ALIVE - 0.5
    transport = Transport(server, {})
    try:
        first = _port(transport)
        assert _port(transport) == first  # in quick succession: the pooled connection
        time.sleep(KEEPALIVE_EXPIRY + 0.5)  # idle past the client's expiry, not the server's
        assert _port(transport) != first
    finally:
        transport.close()
