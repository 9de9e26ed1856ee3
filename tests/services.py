"""Real services for the tests: a Redis (the machine's, or a private one) and workers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """Start a throw-away redis-server on a free port in a temp dir; yield its base URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("no Redis answers and redis-server is not installed")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="toolfan-redis-") as tmp:
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                tmp,
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                str(Path(tmp) / "redis.log"),
            ],
        )
        url = f"redis://127.0.0.1:{port}"
        try:
            wait_for(lambda: redis_answers(url), 10, "private redis-server to start")
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


class Worker:
    """A real ``toolfan worker`` process with its own log file."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dispatcher.cli", "worker", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log()}")
            return " ready." in self.log()

        wait_for(ready, timeout, "the worker to be ready", 0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
