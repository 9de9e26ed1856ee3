"""Real services for the tests, over the same helpers the demo uses."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

from dispatcher.devstack import Service, free_port, private_redis, redis_answers, wait_for

ROOT = Path(__file__).resolve().parent.parent

__all__ = [
    "ROOT",
    "AofRedis",
    "Worker",
    "default_endings",
    "free_port",
    "private_redis",
    "redis_answers",
    "wait_for",
]


def default_endings() -> None:
    """A ``preexec_fn``: SIGTERM and SIGHUP at their default action, as a terminal starts one.

    Whatever the suite inherited: ``nohup`` ignores SIGHUP, and toolfan keeps an ignored
    signal ignored.
    """
    for ending in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(ending, signal.SIG_DFL)


class Worker(Service):
    """A real ``toolfan worker`` process."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        super().__init__(["worker", *args], log_path, env)

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait_for_output(" ready.", timeout)

    def stop_warm(self, timeout: float = 20) -> None:
        """Stop as systemd's ``KillMode=mixed`` does: SIGTERM to the main process only, so
        that it finishes its running tasks, then whatever is left of the group is killed.

        :meth:`stop` signals the whole group, and a pool process that gets SIGTERM dies
        mid-call: fine for tearing a test down, wrong for an orderly restart.
        """
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        self.stop()


class AofRedis:
    """A private ``redis-server`` with AOF on (``appendfsync always``), as the compose file
    ships it, that a test can restart on the same port without losing what it acknowledged."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is needed for this test"
        self.binary, self.directory, self.port = binary, directory, free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.url = f"redis://127.0.0.1:{self.port}"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.directory), "--appendonly", "yes", "--appendfsync", "always"]
        argv += ["--save", "", "--maxmemory-policy", "noeviction"]
        argv += ["--logfile", str(self.directory / "redis.log")]
        proc = subprocess.Popen(argv)
        wait_for(lambda: redis_answers(f"{self.url}/0"), 10, "redis-server")
        return proc

    def stop(self) -> None:
        """Stop the server the way an operator's restart does: SIGTERM, wait for exit."""
        self.proc.terminate()
        self.proc.wait(20)

    def restart(self) -> None:
        self.stop()
        self.restart_stopped()

    def restart_stopped(self) -> None:
        """Start the server again on the same port and directory."""
        self.proc = self._start()
