"""Real services for the tests, over the same helpers the demo uses."""

from __future__ import annotations

from pathlib import Path

from dispatcher.devstack import Service, free_port, private_redis, redis_answers, wait_for

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["ROOT", "Worker", "free_port", "private_redis", "redis_answers", "wait_for"]


class Worker(Service):
    """A real ``toolfan worker`` process."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        super().__init__(["worker", *args], log_path, env)

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait_for_output(" ready.", timeout)
