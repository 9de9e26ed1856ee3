"""Test support: an emulator on a free real port, reusable by any test suite.

Import from here rather than from ``tests/`` so end-to-end tests, benchmarks and demos share
one way of starting the emulator::

    with running_emulator() as emu:
        emu.state.create_session([function_call("add", {"a": 1, "b": 2})])
        client = SessionsClient(api_key="test", base_url=emu.base_url)

A pytest fixture is a one-liner over it (see ``tests/emulator/conftest.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from emulator.app import EmulatorApp
from emulator.server import EmulatorServer
from emulator.state import EmulatorState

#: The token tests send; the emulator accepts any non-empty token unless told otherwise.
TEST_API_KEY = "sk-emulator-test"


@contextmanager
def running_emulator(
    state: EmulatorState | None = None,
    *,
    api_key: str | None = None,
    require_beta_header: bool = True,
    host: str = "127.0.0.1",
) -> Iterator[EmulatorServer]:
    """An emulator serving on a free port of ``host`` for the duration of the block."""
    app = EmulatorApp(state, api_key=api_key, require_beta_header=require_beta_header)
    server = EmulatorServer(app, host=host, port=0, graceful_timeout=1)
    with server:
        yield server


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, poll: float = 0.02) -> None:
    """Poll ``predicate`` until it holds; the emulator's lags and turns are real time."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        time.sleep(poll)
