"""Running the emulator: in the foreground (``toolfan emulator``) or on a background thread.

The listening socket is bound before uvicorn starts, so port 0 yields a free port that is
known before the first request, with no window in which another process could take it.

uvicorn parses requests with httptools where it is installed (a dependency of toolfan for
this), h11 otherwise. The stand-in shares the machine with what a bench measures, while a
user's API is remote: reading one run after another on one connection, the stand-in spent
about 650 us of CPU a read with h11 and 430 with httptools (2026-12-08); in the bench's runs
row its CPU per call fell by a fifth (bench/README.md, "The API stand-in's HTTP parser"). Both
parsers take request heads of megabytes (httptools sets no limit; h11 is given
:data:`MAX_REQUEST_HEAD`), so a hostile id's URL is answered either way.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

import uvicorn

from emulator.app import EmulatorApp
from emulator.state import EmulatorState

#: Bytes a request line plus headers may take. h11's default (16 KiB) refuses the URL of a
#: 10,000-character id, which percent-encoding can grow twelvefold (a 4-byte emoji is 12).
MAX_REQUEST_HEAD = 4 * 1024 * 1024


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # An explicit IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto says TCP, and without it every answer waits 40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class EmulatorServer:
    """A uvicorn server for one :class:`EmulatorApp`, startable and stoppable from a test.

    Args:
        app: The app to serve; a fresh one (with a fresh state) when omitted.
        host: Interface to listen on.
        port: Port to listen on; 0 picks a free one (see :attr:`port` after binding).
        log_level: uvicorn's log level.
        graceful_timeout: Seconds open connections (e.g. event streams) get at shutdown.
    """

    def __init__(
        self,
        app: EmulatorApp | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        graceful_timeout: int = 1,
    ) -> None:
        self.app = app or EmulatorApp()
        self.host = host
        self._socket = _bind(host, port)
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=log_level,
            lifespan="off",
            proxy_headers=False,  # nothing stands in front of a stand-in
            access_log=False,
            timeout_graceful_shutdown=graceful_timeout,
            h11_max_incomplete_event_size=MAX_REQUEST_HEAD,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> EmulatorState:
        """The served app's state, for scripting."""
        return self.app.state

    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:8765``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The API base URL to give a client (``OPENAI_BASE_URL``)."""
        return f"{self.url}/v1"

    def run(self) -> None:
        """Serve in the calling thread until interrupted (uvicorn handles SIGINT/SIGTERM)."""
        self._server.run(sockets=[self._socket])

    def start(self, timeout: float = 10.0) -> EmulatorServer:
        """Serve on a daemon thread; return once uvicorn accepts connections."""
        self._thread = threading.Thread(target=self.run, name=f"emulator:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the emulator did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to exit and wait for the thread; idempotent."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._socket.close()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve(
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    state: EmulatorState | None = None,
    api_key: str | None = None,
    log_level: str = "info",
    out: TextIO | None = None,
) -> None:
    """Serve the emulator in the foreground until interrupted."""
    app = EmulatorApp(state, api_key=api_key)
    server = EmulatorServer(app, host=host, port=port, log_level=log_level)
    print(f"listening on {server.base_url}", file=out or sys.stdout, flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises Ctrl-C after shutting down
        server.run()
