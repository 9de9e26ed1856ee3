"""Local processes for the demo and the tests: a Redis, and toolfan services in the background.

A demo or test run must leave nothing behind, so each service runs in its own process
group (a prefork worker's children included) and is stopped as a group. A Ctrl-C in the
terminal reaches only the parent, which stops them in order; a SIGTERM or SIGHUP does the
same inside :func:`stopped_by_signals` (Python's default for them ends the parent at once,
running no ``finally`` block, and would leave every service running).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, NoReturn, TypeVar

import redis

T = TypeVar("T")
StackT = TypeVar("StackT", bound="Stack")


def redis_answers(url: str) -> bool:
    """Whether a Redis answers PING at ``url`` within a second."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except (redis.RedisError, ValueError):
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Raises:
        TimeoutError: naming ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A throw-away ``redis-server`` on a free port in a temp dir; yields its base URL.

    Raises:
        RuntimeError: redis-server is not installed.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("no Redis answers and redis-server is not installed")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="toolfan-redis-") as tmp:
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp, "--save", ""]
        argv += ["--appendonly", "no", "--logfile", str(Path(tmp) / "redis.log")]
        proc = subprocess.Popen(argv)  # noqa: S603 - our own argv, no shell
        url = f"redis://127.0.0.1:{port}"
        try:
            wait_for(lambda: redis_answers(url), 10, "a private redis-server to start")
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


@contextlib.contextmanager
def redis_base_url(url: str) -> Iterator[str]:
    """The server part of ``url`` when it answers, else a private Redis's."""
    if redis_answers(url):
        yield url.rsplit("/", 1)[0] if url.count("/") > 2 else url
    else:
        with private_redis() as base:
            yield base


#: Signals that end a demo or a bench as Ctrl-C does: ``kill``, ``timeout``, a service
#: manager's stop or a CI job's cancel (SIGTERM), a closed terminal (SIGHUP).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(SystemExit):
    """Raised in the main thread by an ending signal; exits ``128 + signal``, as the shell's."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.status = 128 + signum
        self.signal_name = signal.Signals(signum).name


def take_ending_signals(act: Callable[[int], NoReturn]) -> list[signal.Signals]:
    """Handle SIGTERM and SIGHUP with ``act``, once; returns the signals taken over.

    The first such signal calls ``act`` (which raises); later ones are ignored while the
    caller unwinds, so that a second ``kill`` cannot leave a stack half stopped (SIGKILL
    still ends everything at once). A signal already ignored (``nohup``) stays ignored,
    and outside the main thread, where Python cannot handle signals, nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    ending = [s for s in ENDING_SIGNALS if signal.getsignal(s) is signal.SIG_DFL]

    def ignore(signum: int, frame: FrameType | None) -> None:
        """A Python handler, not SIG_IGN: processes started now must not inherit it."""

    def stop(signum: int, frame: FrameType | None) -> None:
        for s in ending:
            signal.signal(s, ignore)
        act(signum)

    for s in ending:
        signal.signal(s, stop)
    return ending


def _raise_stopped(signum: int) -> NoReturn:
    raise Stopped(signum)


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into :class:`Stopped`, so the stacks inside stop their services.

    As :func:`take_ending_signals` does, for the block's length.
    """
    ending = take_ending_signals(_raise_stopped)
    try:
        yield
    finally:
        for s in ending:
            signal.signal(s, signal.SIG_DFL)


def until_stopped(prog: str, run: Callable[[], int]) -> int:
    """``run()`` inside :func:`stopped_by_signals`: its exit status, or ``128 + signal``.

    What a command that starts services does with its whole body: once a signal has
    stopped them, one line on stderr says so.
    """
    try:
        with stopped_by_signals():
            return run()
    except Stopped as exc:
        print(f"{prog}: stopped by {exc.signal_name}; its services are stopped", file=sys.stderr)
        return exc.status


class Service:
    """A toolfan command running in the background, its output in a log file."""

    def __init__(self, args: Sequence[str], log_path: Path, env: Mapping[str, str]) -> None:
        self.log_path = log_path
        self._log: IO[str] = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - our own argv, no shell
            [sys.executable, "-m", "dispatcher.cli", *args],
            env=dict(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        """Everything the service printed so far."""
        return self.log_path.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 60) -> None:
        """Wait until the service prints ``text``.

        Raises:
            RuntimeError: the service exited first (its log is in the message).
        """

        def printed() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.log_path.stem} exited early:\n{self.log()}")
            return text in self.log()

        wait_for(printed, timeout, f"{self.log_path.stem} to print {text!r}", 0.1)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after ``timeout``.

        An ending signal may come while this stop waits (a ``kill`` as the stack stops
        after a normal end): its :class:`Stopped` would skip the SIGKILL and leave the
        group's stragglers running. So this stop is finished first, with its full
        ``timeout`` (later signals are ignored by then), and the signal raised after it.
        """
        try:
            self._stop(timeout)
        except Stopped:
            self._stop(timeout)
            raise

    def _stop(self, timeout: float) -> None:
        """One stop; done again, it only finishes what the first one left."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


class Stack:
    """Services started together and stopped together, even when starting fails half way.

    Subclasses start their services in :meth:`_start`, registering each stop with
    ``self._stack``; leaving the ``with`` block (or a failed start) stops them all.
    """

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()

    def __enter__(self: StackT) -> StackT:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        raise NotImplementedError
