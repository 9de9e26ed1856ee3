"""The intake's connections: a request arrives whole in time, or its connection is closed.

A real uvicorn server in this process, with the intake's protocol and a small app, and
raw sockets as clients. The deadlines are shortened here (0.5 s to arrive, a 2 s keep-alive)
because each case at the defaults (30 s and 75 s) would take a minute or more:
``tests/e2e/test_webhook_intake.py`` holds one run of a real ``toolfan webhook`` with them.
They still wait about 13 s in all, so ``make test-fast`` leaves them to ``make test``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dispatcher.webhook import deadline
from dispatcher.webhook.app import _gone, read_body
from dispatcher.webhook.throttle import Throttle

pytestmark = pytest.mark.slow

RECEIPT = 0.5
KEEP_ALIVE = 2.0
REQUEST = b"POST /echo HTTP/1.1\r\nHost: intake\r\nContent-Length: 3\r\n\r\nabc"


async def _echo(request: Request) -> Response:
    body = await read_body(request, 1 << 20)
    return JSONResponse({"bytes": len(body)})


async def _slow_answer(request: Request) -> Response:
    await asyncio.sleep(RECEIPT * 3)
    return JSONResponse({"late": True})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = Starlette(
        routes=[Route("/echo", _echo, methods=["POST"]), Route("/slow", _slow_answer)],
        exception_handlers={ClientDisconnect: _gone},
    )
    config = uvicorn.Config(
        app,
        log_config=None,  # uvicorn's records reach the root logger, and so caplog
        http=deadline.IntakeProtocol,
        ws="none",
        timeout_keep_alive=int(KEEP_ALIVE),
    )
    served = uvicorn.Server(config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deadline, "RECEIPT_SECONDS", RECEIPT)
        thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not served.started:
            time.sleep(0.01)
        yield sock.getsockname()[1]
        served.should_exit = True
        thread.join(10)


def _connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.settimeout(10)
    return conn


def _closed_after(conn: socket.socket, since: float) -> float:
    """Seconds from ``since`` until the server closed ``conn`` (it sent nothing)."""
    with conn:
        assert conn.recv(100) == b""
    return time.monotonic() - since


def _answer(conn: socket.socket) -> bytes:
    """One whole answer of the echo route (its head and its small JSON body)."""
    data = b""
    while b'{"bytes":3}' not in data and b'{"late":true}' not in data:
        chunk = conn.recv(4096)
        assert chunk, data
        data += chunk
    return data


def _closed(reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "toolfan_webhook_connections_closed_total", {"reason": reason}
    )
    return value or 0.0


def test_a_connection_that_sends_nothing_is_closed_after_the_keep_alive(port: int) -> None:
    before = _closed(deadline.SILENT)
    started = time.monotonic()
    assert KEEP_ALIVE - 0.1 < _closed_after(_connect(port), started) < KEEP_ALIVE + 2
    assert _closed(deadline.SILENT) == before + 1


@pytest.mark.parametrize(
    "part",
    [
        b"POST /echo HTTP/1.1\r\nHost: intake\r\n",  # half a head
        b"POST /echo HTTP/1.1\r\nHost: intake\r\nContent-Length: 3\r\n\r\na",  # part of a body
    ],
    ids=["head", "body"],
)
def test_a_request_that_does_not_arrive_whole_in_time_loses_its_connection(
    port: int, part: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    before = _closed(deadline.SLOW)
    conn = _connect(port)
    conn.sendall(part)
    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        assert RECEIPT - 0.1 < _closed_after(conn, started) < RECEIPT + 2
        time.sleep(0.2)  # the app's handler sees the body cut short
    assert _closed(deadline.SLOW) == before + 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_trickle_of_bytes_does_not_keep_a_request_alive(port: int) -> None:
    conn = _connect(port)
    started = time.monotonic()
    with conn:
        try:
            for byte in REQUEST[:-1]:  # each byte well within the deadline, never the last
                conn.sendall(bytes([byte]))
                time.sleep(0.05)
        except OSError:  # the server closed it while this side still sent
            pass
        assert conn.recv(100) == b""
    assert time.monotonic() - started < RECEIPT + 2


def test_a_kept_connection_answers_requests_past_the_arrival_deadline(port: int) -> None:
    # Between requests only the keep-alive counts, and a slow answer is never cut.
    with _connect(port) as conn:
        conn.sendall(REQUEST)
        assert b"200 OK" in _answer(conn)
        time.sleep(RECEIPT * 1.5)  # longer than a request may take, shorter than keep-alive
        conn.sendall(REQUEST)
        assert b"200 OK" in _answer(conn)
        conn.sendall(b"GET /slow HTTP/1.1\r\nHost: intake\r\n\r\n")
        assert b"200 OK" in _answer(conn)


def test_pipelined_requests_are_answered_and_leave_no_deadline_behind(port: int) -> None:
    with _connect(port) as conn:
        conn.sendall(REQUEST * 2)
        data = b""
        while data.count(b'{"bytes":3}') < 2:
            chunk = conn.recv(4096)
            assert chunk, data
            data += chunk
        time.sleep(RECEIPT * 1.5)
        conn.sendall(REQUEST)
        assert b"200 OK" in _answer(conn)


def test_a_request_sent_while_the_last_answer_is_pending_arrives_in_time(port: int) -> None:
    # It arrives whole while the slow answer is still being made, and the server takes it
    # up only once that answer is out: the deadline ends then, not at its own last byte.
    with _connect(port) as conn:
        conn.sendall(b"GET /slow HTTP/1.1\r\nHost: intake\r\n\r\n")
        time.sleep(0.2)
        conn.sendall(REQUEST)
        data = b""
        while b'{"bytes":3}' not in data:
            chunk = conn.recv(4096)
            assert chunk, data
            data += chunk
        assert b'{"late":true}' in data
        time.sleep(RECEIPT * 1.5)
        conn.sendall(REQUEST)
        assert b"200 OK" in _answer(conn)


def test_part_of_a_request_sent_behind_a_pending_answer_is_timed_from_that_answer(
    port: int,
) -> None:
    # Its deadline starts when the server takes it up, and is the arrival deadline there,
    # not the longer keep-alive.
    conn = _connect(port)
    conn.sendall(b"GET /slow HTTP/1.1\r\nHost: intake\r\n\r\n")
    time.sleep(0.2)
    conn.sendall(b"POST /echo HTTP/1.1\r\n")
    data = b""
    while b'{"late":true}' not in data:
        chunk = conn.recv(4096)
        assert chunk, data
        data += chunk
    answered = time.monotonic()
    assert RECEIPT - 0.1 < _closed_after(conn, answered) < (RECEIPT + KEEP_ALIVE) / 2 + 0.25


def test_closed_connections_are_logged_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(deadline, "_CLOSES", Throttle(deadline.LOG_EVERY, lambda: now[0]))
    with caplog.at_level(logging.WARNING, logger="toolfan.webhook"):
        for _ in range(5):
            deadline._report(deadline.SLOW, ("203.0.113.9", 4000))
    (line,) = caplog.records
    assert "203.0.113.9:4000" in line.getMessage()
    assert f"within {deadline.RECEIPT_SECONDS:g} s" in line.getMessage()
    now[0] += deadline.LOG_EVERY  # a minute later
    with caplog.at_level(logging.WARNING, logger="toolfan.webhook"):
        deadline._report(deadline.SILENT, None)
    assert "sent nothing" in caplog.records[-1].getMessage()
    assert "; 5 closed unanswered since the last such line" in caplog.records[-1].getMessage()
