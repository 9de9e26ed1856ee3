"""An API client shared by the control worker's threads has a connection for each of them.

A bare ``toolfan worker`` delivers batches on ``TOOLFAN_CONTROL_THREADS`` threads (64),
which share one client per API. With fewer connections than threads, the threads past
the pool's limit wait for a connection, so an API 200 ms away delivers fewer batches a
second than the threads could; and with fewer kept connections than threads, each
connection past the kept count is closed once its answer is read, so the thread's next
request opens a new one (a TCP and a TLS handshake to a real API). A real uvicorn server
holds each request 0.3 s and reports how many it holds at once and from which ports.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dispatcher.transport import DEFAULT_LIMITS, Transport, connection_limits
from tasks.settings import Settings

#: Seconds the server holds each request: long enough for every thread's to overlap.
HOLD = 0.3


@dataclass
class Seen:
    """What the server saw: requests held at once (now, at most) and the clients' ports."""

    held: int = 0
    most: int = 0
    ports: list[int] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[tuple[str, Seen]]:
    seen = Seen()

    async def slow(request: Request) -> JSONResponse:
        assert request.client is not None
        seen.ports.append(request.client.port)
        seen.held += 1
        seen.most = max(seen.most, seen.held)
        await asyncio.sleep(HOLD)
        seen.held -= 1
        return JSONResponse({})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    config = uvicorn.Config(Starlette(routes=[Route("/slow", slow)]), log_level="warning")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not served.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
    served.should_exit = True
    thread.join(10)


def _burst(transport: Transport, threads: int) -> None:
    """One request from each of ``threads`` threads, all sent together."""
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def send() -> None:
        start.wait()
        try:
            transport.request("GET", "/slow")
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    workers = [threading.Thread(target=send) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert not failures, failures[:3]


def test_the_control_workers_threads_each_have_a_connection(server: tuple[str, Seen]) -> None:
    url, seen = server
    threads = Settings.from_env({}).control_threads
    transport = Transport(url, {})  # the limits every API client gets by default
    try:
        _burst(transport, threads)
        assert seen.most == threads  # all at once: none waited for another's connection
        first = set(seen.ports)
        assert len(first) == threads
        seen.ports.clear()
        _burst(transport, threads)
        assert set(seen.ports) == first  # each kept its connection: no new handshake
    finally:
        transport.close()


def test_more_threads_get_a_larger_pool() -> None:
    threads = Settings.from_env({}).control_threads
    assert DEFAULT_LIMITS.max_keepalive_connections == threads
    assert (DEFAULT_LIMITS.max_connections or 0) > threads  # room for the runs readers
    larger = connection_limits(300)
    assert (larger.max_keepalive_connections, larger.max_connections) == (300, 300)
    assert connection_limits(8) == DEFAULT_LIMITS  # never fewer than the defaults
