"""Test support: a tiny real HTTP receiver that records every push and answers as told.

Deliveries are real HTTP, so their tests need a real server on a real port. This one is
the standard library's threading server (no event loop to share with the emulator's): it
records each request's body and headers, and answers with scripted statuses, optionally
after a delay, so tests can make a receiver fail, flap or be slow::

    with running_receiver() as receiver:
        emu.state.webhooks.register(receiver.url)
        receiver.fail_next(500, 500)  # the next two requests get 500, then 200 again
        ...
        (push,) = receiver.wait_for(1)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _QuietServer(ThreadingHTTPServer):
    """A threading server that does not print a traceback when a sender hangs up early."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore connection errors (a timed-out sender left); report anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass(frozen=True)
class Push:
    """One request the receiver got.

    Attributes:
        path: The request path.
        headers: The headers, names lower-cased (the last value of a repeated header).
        body: The raw body bytes.
        at: Unix time it arrived (before any scripted delay).
        status: What the receiver answered.
    """

    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class WebhookReceiver:
    """An HTTP server on ``host``:``port`` (0: a free port) recording every POST.

    Attributes:
        status: The status answered when no scripted one is left (default 200).
        delay: Seconds every request waits before it is answered (a slow receiver).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.status = 200
        self.delay = 0.0
        self._lock = threading.Condition()
        self._pushes: list[Push] = []
        self._scripted: deque[int] = deque()
        self._server = _QuietServer((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The URL to register, e.g. ``http://127.0.0.1:54321/webhook``."""
        return f"http://127.0.0.1:{self.port}/webhook"

    def fail_next(self, *statuses: int) -> None:
        """Answer the next requests with these statuses, in order, then ``status`` again."""
        with self._lock:
            self._scripted.extend(statuses)

    def pushes(self) -> list[Push]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._pushes)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Push]:
        """Wait until at least ``count`` requests arrived; ``AssertionError`` on timeout."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._pushes) >= count, timeout):
                raise AssertionError(
                    f"{len(self._pushes)} of {count} webhook pushes arrived within {timeout}s"
                )
            return list(self._pushes)

    def start(self) -> WebhookReceiver:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"webhook-receiver:{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()

    def _answer(self, push: Push) -> None:
        with self._lock:
            self._pushes.append(push)
            self._lock.notify_all()

    def _next_status(self) -> int:
        with self._lock:
            return self._scripted.popleft() if self._scripted else self.status

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived, delay = time.time(), receiver.delay
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                status = receiver._next_status()
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver._answer(Push(self.path, headers, body, arrived, status))
                if delay:
                    time.sleep(delay)
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                """Silence the per-request log lines."""

        return Handler


@contextmanager
def running_receiver(host: str = "127.0.0.1", port: int = 0) -> Iterator[WebhookReceiver]:
    """A :class:`WebhookReceiver` serving for the duration of the block."""
    receiver = WebhookReceiver(host, port).start()
    try:
        yield receiver
    finally:
        receiver.stop()
