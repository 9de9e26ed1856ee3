"""Fault matrix, part 3: Redis restarted mid-run, with AOF on as the compose file ships it."""

import os
import socket
import threading
import time

import pytest
from celery import Celery

from dispatcher.devstack import Service
from tests.conftest import worker_env
from tests.e2e.harness import answered, check_exactly_once, seed
from tests.services import AofRedis, Worker, wait_for


@pytest.fixture
def aof_redis(tmp_path):
    server = AofRedis(tmp_path / "redis")
    yield server.url, server.restart
    server.stop()


class Supervised:
    """Restarts the worker when it exits or stops answering pings, as production does.

    On a broker connection loss Celery's worker sometimes stops with "Unrecoverable
    error" (kombu's Redis transport fails while restoring unacked messages), and sometimes
    stays up without consuming again. The shipped systemd units and compose file restart
    exited workers and the Kubernetes manifests add a ping liveness probe; so does this.
    """

    def __init__(self, tmp_path, env) -> None:
        self.tmp_path, self.env, self.restarts = tmp_path, env, 0
        self.control = Celery(broker=env["TOOLFAN_BROKER_URL"], set_as_current=False).control
        self.missed = 0
        self.worker = self._start()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _start(self) -> Worker:
        return Worker(
            ["-c", "2", "-n", "aof@%h", "--without-mingle", "--without-gossip"],
            self.tmp_path / f"worker-{self.restarts}.log",
            self.env,
        )

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            if self.worker.proc.poll() is not None or self._unresponsive():
                self.worker.stop_warm()
                self.restarts += 1
                self.missed = 0
                self.worker = self._start()

    def _unresponsive(self) -> bool:
        """Three missed pings in a row, once the worker said it was ready."""
        if " ready." not in self.worker.log():
            return False
        try:
            answered = self.control.ping(destination=[self.name()], timeout=1.0)
        except Exception:  # the broker itself is down: not the worker's fault
            return False
        self.missed = 0 if answered else self.missed + 1
        return self.missed >= 3

    def name(self) -> str:
        return f"aof@{socket.gethostname()}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.worker.stop()


def test_redis_restarted_mid_run_loses_nothing(api, aof_redis, tmp_path, redis_client):
    url, restart = aof_redis
    env = worker_env(
        # Side effects are counted on the suite's Redis, which stays up: had the tool
        # counted on the restarted one, a call could fail on its own INCR, be answered
        # with that error (correctly) and leave no count.
        TEST_COUNTER_REDIS_URL=os.environ["TOOLFAN_REDIS_URL"],
        TOOLFAN_REDIS_URL=f"{url}/0",
        TOOLFAN_BROKER_URL=f"{url}/1",
        TOOLFAN_QUEUE_BUDGET="3",
        TOOLFAN_TIME_LIMIT_GRACE="1",
        TOOLFAN_API_TIMEOUT="2",
    )
    supervised = Supervised(tmp_path, env)
    poller = Service(["poll", "--interval", "0.2"], tmp_path / "poller.log", env)
    try:
        supervised.worker.wait_ready()
        seeded = seed(api, 40)
        wait_for(lambda: len(api.batches()) >= 5, 60, "the first answers")
        restart()
        seed(api, 10, seeded)  # arrive after the restart
        wait_for(lambda: answered(api, seeded), 180, "every session to be answered", 0.2)
        time.sleep(1.0)
    finally:
        poller.stop()
        supervised.stop()
    check_exactly_once(api, seeded, redis_client)
