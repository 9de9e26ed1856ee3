"""A bare ``toolfan worker`` is two Celery workers, started, restarted and stopped together.

Its prefork pool consumes the function queues; the control worker it starts consumes
toolfan's own queues on threads, so a delivery waiting for the API holds no pool process.
Each test runs a worker of its own on Redis databases 2 (broker) and 3 (ledger), flushed at
start and end, so it never takes the suite's messages (its queues are every queue).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from celery import Celery
from kombu import Connection

from tasks.queues import ControlQueue
from tasks.settings import Settings, load_registry
from tests.calls import agents_call
from tests.conftest import worker_env
from tests.owned import OwnedDatabases
from tests.services import Worker, free_port, wait_for

pytestmark = pytest.mark.slow

BROKER_DB, LEDGER_DB = 2, 3


@dataclass
class Bare:
    """The running worker, its two node names, and a Celery client of its broker."""

    worker: Worker
    pool: str
    control: str
    client: Celery

    def control_pid(self) -> int | None:
        """The pid of the control worker process (a child of the main process), if alive."""
        for child in psutil.Process(self.worker.proc.pid).children():
            if "tasks.control_worker" in " ".join(child.cmdline()):
                return child.pid
        return None

    def pings(self, node: str) -> bool:
        return bool(self.client.control.ping(destination=[node], timeout=1.0))


def own_databases(**extra: str) -> tuple[OwnedDatabases, dict[str, str]]:
    """Databases 2 and 3, flushed, and a worker environment using them (``extra`` added)."""
    base = re.sub(r"/\d+$", "", os.environ["TOOLFAN_REDIS_URL"])
    databases = OwnedDatabases(base, (BROKER_DB, LEDGER_DB), "control-worker")
    databases.flush()
    env = worker_env(
        TOOLFAN_REDIS_URL=f"{base}/{LEDGER_DB}", TOOLFAN_BROKER_URL=f"{base}/{BROKER_DB}", **extra
    )
    return databases, env


def options(name: str) -> list[str]:
    """A bare worker's options: one pool process, a name, no chatter with the suite's."""
    return ["-c", "1", "-n", f"{name}@%h", "--without-mingle", "--without-gossip"]


@contextmanager
def running_bare(tmp_path: Path, **extra: str) -> Iterator[Bare]:
    """A bare worker on databases 2 and 3, once its pool consumes; ``extra`` env added."""
    databases, env = own_databases(**extra)
    name, host = f"bare{uuid.uuid4().hex[:6]}", socket.gethostname()
    worker = Worker(options(name), tmp_path / "worker.log", env)
    client = Celery(broker=env["TOOLFAN_BROKER_URL"], set_as_current=False)  # the suite's stays
    try:
        worker.wait_for_output(f"{name}@{host} ready.")
        yield Bare(worker, f"{name}@{host}", f"{name}-control@{host}", client)
    finally:
        worker.stop()
        client.close()
        databases.flush()


@pytest.fixture
def bare(tmp_path: Path, emulator: object) -> Iterator[Bare]:
    """The worker, once its pool consumes (the API is the suite's emulator)."""
    with running_bare(tmp_path) as worker:
        yield worker


def test_the_pool_takes_the_function_queues_and_the_control_worker_the_control_queues(
    bare: Bare,
) -> None:
    inspect = bare.client.control.inspect(destination=[bare.pool, bare.control], timeout=2)
    queues = {node: {q["name"] for q in qs} for node, qs in (inspect.active_queues() or {}).items()}
    control = {q.value for q in ControlQueue}
    assert set(queues) == {bare.pool, bare.control} and queues[bare.control] == control
    # The worker's registry: the suite's tool modules (this process may have loaded more).
    assert {"fn.add", "fn.count"} <= queues[bare.pool] <= set(load_registry().queues()) - control
    stats = inspect.stats() or {}
    assert stats[bare.pool]["pool"]["max-concurrency"] == 1
    assert "prefork" in stats[bare.pool]["pool"]["implementation"]
    assert stats[bare.control]["pool"]["max-concurrency"] == Settings.from_env({}).control_threads
    assert "thread" in stats[bare.control]["pool"]["implementation"]


def test_a_killed_control_worker_is_started_again(bare: Bare) -> None:
    first = bare.control_pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: "starting it again" in bare.worker.log(), 30, "the restart's log line")
    second = wait_for(lambda: bare.control_pid() not in (None, first), 30, "a new control worker")
    assert second
    wait_for(lambda: bare.pings(bare.control), 60, "the new control worker to answer")
    assert bare.pings(bare.pool)


def test_sigterm_to_the_main_process_alone_stops_both_warm(bare: Bare) -> None:
    child = bare.control_pid()
    assert child is not None
    os.kill(bare.worker.proc.pid, signal.SIGTERM)  # systemd's KillMode=mixed, docker stop
    assert bare.worker.proc.wait(30) == 0
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    assert bare.worker.log().count("Warm shutdown (MainProcess)") == 2


def test_the_control_worker_dies_with_a_killed_main_process(bare: Bare) -> None:
    child = bare.control_pid()
    assert child is not None
    os.kill(bare.worker.proc.pid, signal.SIGKILL)  # an OOM kill of the main process alone
    wait_for(lambda: not psutil.pid_exists(child), 30, "the orphaned control worker to stop")


def test_a_shutdown_during_the_restart_back_off_starts_no_new_control_worker(bare: Bare) -> None:
    first = bare.control_pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: "starting it again" in bare.worker.log(), 30, "the restart's log line")
    os.kill(bare.worker.proc.pid, signal.SIGTERM)  # within the first back-off's second
    assert bare.worker.proc.wait(30) == 0
    time.sleep(2)  # past the back-off: a restarted control worker would be up by now
    assert bare.worker.log().count(f"{bare.control} ready.") == 1
    local = bare.control.split("@")[0]  # "<name>-control", in its -n option
    assert local not in " ".join(
        " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
    )


def test_the_pool_s_metrics_endpoint_serves_the_control_worker_s_samples(
    tmp_path: Path, emulator: object
) -> None:
    """One endpoint per ``toolfan worker``: the control worker must not bind the same port.

    A call of a function nobody registered goes to ``toolfan.submit``, so the control worker
    answers it, and its counter reaches the pool's endpoint through the shared directory.
    """
    port = free_port()
    env = {"TOOLFAN_METRICS_PORT": str(port), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "m")}
    (tmp_path / "m").mkdir()
    with running_bare(tmp_path, **env) as bare:
        with Connection(bare.client.conf.broker_url) as connection:
            call = agents_call(f"sess_{uuid.uuid4().hex[:8]}", "turn_1", "call_1", "nope", {})
            call.apply_async(connection=connection)

        def counted() -> bool:
            with httpx.Client() as http:
                text = http.get(f"http://127.0.0.1:{port}/metrics").text
            return 'outcome="unknown_function"' in text

        wait_for(counted, 30, "the control worker's call on the pool's endpoint", 0.5)
        # The main process serves it: had the control worker (started first) taken the
        # port, the pool's own endpoint would have failed to bind, with no line saying so.
        listening = psutil.Process(bare.worker.proc.pid).net_connections(kind="tcp")
        assert any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in listening)
        assert "starting it again" not in bare.worker.log()


def test_a_metrics_port_already_taken_is_reported(tmp_path: Path, emulator: object) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with running_bare(tmp_path, TOOLFAN_METRICS_PORT=str(port)) as bare:
            assert f"no metrics endpoint: TOOLFAN_METRICS_PORT={port}" in bare.worker.log()


def test_a_tasks_module_in_the_working_directory_does_not_hide_toolfan_s(
    tmp_path: Path, emulator: object
) -> None:
    """``toolfan worker`` run where a project keeps its own ``tasks.py``, as Celery's users do.

    The console script does not import from its working directory; the control worker must
    not either, or ``tasks.control_worker`` is looked for in the project's module.
    """
    script = Path(sys.executable).with_name("toolfan")
    assert script.exists(), "make install puts the toolfan script beside the interpreter"
    project = tmp_path / "project"
    project.mkdir()
    (project / "tasks.py").write_text("raise SystemExit('the project tasks.py was imported')\n")
    databases, env = own_databases()
    name, host = f"proj{uuid.uuid4().hex[:6]}", socket.gethostname()
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(script), "worker", *options(name)],
            cwd=project,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: f"{name}@{host} ready." in log_path.read_text(), 60, "the pool")
        text = log_path.read_text()
        assert f"{name}-control@{host} ready." in text, text[-2000:]
        assert "starting it again" not in text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        databases.flush()
