"""The bench's own processes: a Redis (two databases of it), the emulator, workers, poller.

It never touches databases other than its two (flushed at start and end), and every
service is a subprocess in its own process group, so the measuring process shares no GIL
with what it measures and nothing is left behind.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import redis

from bench.config import BenchConfig, Workload
from dispatcher.devstack import (
    Service,
    Stack,
    free_port,
    private_redis,
    redis_base_url,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "bench"
HANDLERS = "bench.tools"
SUBMIT_QUEUE = "toolfan.submit"


@contextmanager
def redis_server(config: BenchConfig) -> Iterator[str]:
    """The base URL (no database) of the Redis to use: shared, or a private one."""
    if config.private_redis:
        with private_redis() as base:
            yield base
        return
    url = config.redis_url or os.environ.get("TOOLFAN_REDIS_URL", "redis://localhost:6379/0")
    with redis_base_url(url) as base:
        yield base


def service_env(base: str, config: BenchConfig, api_url: str) -> dict[str, str]:
    """The environment of every bench process: only the bench's toolfan settings.

    Everything else is toolfan's default, JSON logs included: what users run is what is
    measured. The API timeout is the one exception: it never fires in a healthy run, and a
    request lost by a broken stand-in fails the repetition in 10 s instead of 30.
    """
    ours = ("TOOLFAN_", "OPENAI_", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(
        PYTHONPATH=path,
        TOOLFAN_REDIS_URL=f"{base}/{config.ledger_db}",
        TOOLFAN_BROKER_URL=f"{base}/{config.broker_db}",
        TOOLFAN_HANDLERS=HANDLERS,
        TOOLFAN_API_TIMEOUT="10",
        OPENAI_BASE_URL=api_url,
        OPENAI_API_KEY=API_KEY,
    )
    return env


#: The ledger database's key naming the bench that owns both databases, while it runs.
OWNER_KEY = "bench:owner"
#: Seconds the owner key lives unless renewed: a bench killed -9 frees the databases soon.
OWNER_TTL = 30


class DatabasesInUse(RuntimeError):
    """Another bench is measuring on the same two Redis databases."""


@contextmanager
def owned(stack: BenchStack) -> Iterator[None]:
    """Own the bench's two databases while measuring: flush them, and keep others out.

    Two benches on one pair of databases consume each other's tasks and flush each other's
    records: every figure of both would be wrong, so the second one stops at once, saying
    why.

    Raises:
        DatabasesInUse: another bench's key is there.
    """
    config = stack.config
    with owning(stack.redis(), f"{config.broker_db} and {config.ledger_db}", stack.flush):
        yield


@contextmanager
def owning(client: redis.Redis, databases: str, flush: Callable[[], object]) -> Iterator[None]:
    """Hold the owner key in ``client``'s database, after ``flush``; refuse if another does.

    The key is renewed by a thread and expires soon after its holder dies. ``client`` is
    closed at the end.

    Raises:
        DatabasesInUse: another bench's key is there.
    """
    holder = client.get(OWNER_KEY)
    if isinstance(holder, bytes):
        holder = holder.decode(errors="replace")
    if holder is not None:
        client.close()
        raise DatabasesInUse(
            f"another bench ({holder}) is running on Redis databases {databases}: wait for "
            "it, pass --private-redis, or choose other databases (the --*-db options)"
        )
    flush()
    owner = f"pid {os.getpid()} on {socket.gethostname()}"
    client.set(OWNER_KEY, owner, ex=OWNER_TTL)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(OWNER_TTL / 3):
            client.set(OWNER_KEY, owner, ex=OWNER_TTL)

    thread = threading.Thread(target=renew, name="bench-owner", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        client.delete(OWNER_KEY)  # a renewal may have come after the final flush
        client.close()


class BenchStack(Stack):
    """Redis databases, the emulator, and the worker and poller of the current phase."""

    def __init__(self, config: BenchConfig, workdir: Path) -> None:
        super().__init__()
        self.config = config
        self.workdir = workdir
        self.base = ""
        self.env: dict[str, str] = {}
        self.port = 0
        self.emulator_pid = 0
        #: Each service's process id -> its role, for CPU by process (``track``).
        self.roles: dict[int, str] = {}

    def track(self, service: Service, role: str) -> Service:
        """Remember ``service``'s role (``workers``, ``poller``, ``intake``...); returns it."""
        self.roles[service.proc.pid] = role
        return service

    def _start(self) -> None:
        self.base = self._stack.enter_context(redis_server(self.config))
        self._stack.enter_context(owned(self))
        self._stack.callback(self.flush)
        self.port = free_port()
        self.env = service_env(self.base, self.config, f"{self.origin}/v1")
        argv = ["emulator", "--port", str(self.port), "--log-level", "warning"]
        emulator = self.track(Service(argv, self.workdir / "emulator.log", self.env), "api")
        self._stack.callback(emulator.stop)
        emulator.wait_for_output("listening", 60)
        self.emulator_pid = emulator.proc.pid

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>`` of the emulator."""
        return f"http://127.0.0.1:{self.port}"

    def redis(self) -> redis.Redis:
        """A client of the ledger database (for counters and the raw chords' records)."""
        return redis.Redis.from_url(f"{self.base}/{self.config.ledger_db}")

    def flush(self) -> None:
        """Empty the bench's two databases, and only those."""
        for db in (self.config.broker_db, self.config.ledger_db):
            client = redis.Redis.from_url(f"{self.base}/{db}")
            try:
                client.flushdb()
            finally:
                client.close()

    @contextmanager
    def workers(self, workload: Workload) -> Iterator[list[Service]]:
        """The workload's workers (each on every queue, as ``toolfan worker`` is)."""
        services: list[Service] = []
        try:
            for i in range(workload.workers):
                services.append(self._worker(workload, i))
            yield services
        finally:
            for service in services:
                service.stop()

    def _worker(self, workload: Workload, index: int) -> Service:
        """``toolfan worker`` with its defaults, but for a workload's pool and concurrency.

        Every queue, INFO logs, mingle and gossip, as a user's; and a name to ping it by.
        """
        options: list[str] = []
        if workload.concurrency is not None:
            options += ["-c", str(workload.concurrency)]
        if workload.pool is not None:
            options += ["-P", workload.pool]
        return self.worker(options, f"{workload.name}{index}")

    def worker(
        self, options: list[str], label: str, env: Mapping[str, str] | None = None
    ) -> Service:
        """``toolfan worker OPTIONS``, named after ``label``, once it answers a ping.

        Its log is ``worker-LABEL.log``; its CPU (its control worker's included) counts
        under the role ``workers``. ``env`` adds to the bench's environment. A worker that
        starts a control worker answers only once that one consumes too.
        """
        name = f"bench-{label}-{uuid.uuid4().hex[:6]}"
        argv = ["worker", "-n", f"{name}@%h", *options]
        log = self.workdir / f"worker-{label}.log"
        service = self.track(Service(argv, log, {**self.env, **(env or {})}), "workers")
        try:
            wait_for(lambda: _pong(service, name), 90, f"the {label} worker", 0.2)
        except BaseException:
            service.stop()
            raise
        return service

    @contextmanager
    def pusher(self) -> Iterator[str]:
        """The push phase's intake, push worker and safety-net poller; the intake's URL."""
        yield from push_stack(self)

    @contextmanager
    def poller(self) -> Iterator[Service]:
        """``toolfan poll --interval`` (it prints one ``poll:`` line per pass)."""
        interval = str(self.config.poll_interval)
        argv = ["poll", "--interval", interval]
        service = self.track(Service(argv, self.workdir / "poller.log", self.env), "poller")
        try:
            service.wait_for_output("poll:", 60)
            yield service
        finally:
            service.stop()


#: The signing secret the bench's emulator and intake share (a bench, not a deployment).
WEBHOOK_SECRET = "whsec_" + "YmVuY2gtYmVuY2gtYmVuY2gtYmVuY2gtYmVuY2gtYmU="
#: The safety-net poll interval of the push phase: pushes answer, polls only catch up.
SAFETY_NET_INTERVAL = 60


def push_stack(stack: BenchStack) -> Iterator[str]:
    """``toolfan webhook``, a worker on ``toolfan.poll`` (the push tasks), a 60 s poller.

    Yields the intake's URL. The workload's own workers keep running the calls.
    """
    port = free_port()
    env = {**stack.env, "OPENAI_WEBHOOK_SECRET": WEBHOOK_SECRET}
    logs = stack.workdir
    intake = stack.track(
        Service(["webhook", "--port", str(port)], logs / "webhook.log", env), "intake"
    )
    name = f"bench-push-{uuid.uuid4().hex[:6]}"
    argv = ["worker", "-c", "4", "-P", "threads", "-n", f"{name}@%h", "-Q", "toolfan.poll"]
    worker = Service(
        [*argv, "--without-mingle", "--without-gossip", "-l", "WARNING"],
        logs / "worker-push.log",
        env,
    )
    stack.track(worker, "push worker")
    safety_net = ["poll", "--interval", str(SAFETY_NET_INTERVAL)]
    poller = stack.track(Service(safety_net, logs / "poller-60.log", env), "safety-net poller")
    try:
        intake.wait_for_output("listening", 60)
        wait_for(lambda: _pong(worker, name), 90, "the push worker", 0.2)
        poller.wait_for_output("poll:", 60)
        yield f"http://127.0.0.1:{port}/webhooks/openai"
    finally:
        for service in (poller, worker, intake):
            service.stop()


def _pong(service: Service, name: str) -> bool:
    """Whether the worker answers a ping (it logs at WARNING, so no "ready." line).

    Raises:
        RuntimeError: the worker exited (its log is in the message).
    """
    if service.proc.poll() is not None:
        raise RuntimeError(f"worker exited early:\n{service.log()}")
    from tasks.app import app

    replies = app.control.ping(timeout=0.5) or []
    return any(name in reply_name for reply in replies for reply_name in reply)


def poll_passes(poller: Service) -> int:
    """Passes the poller has finished so far (one ``poll:`` line each)."""
    return sum(
        1 for line in poller.log().splitlines() if line.startswith("poll: ") and "seen" in line
    )
