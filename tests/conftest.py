"""Test set-up: a real Redis (a private one unless TOOLFAN_TEST_REDIS_URL names one), real workers.

The environment is fixed in ``pytest_configure``, before any toolfan module is imported,
because every toolfan process reads its settings from the environment once. Tests use two
databases of that Redis: 14 for the broker, 15 for results and the ledger (flushed per
test); stacks of their own use others (the README's table lists every number).
``--broker=rabbitmq`` puts the test workers' messages on RabbitMQ
(``TOOLFAN_TEST_AMQP_URL``) instead of database 14.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import redis
from hypothesis import settings as hypothesis_settings
from kombu import Connection

from dispatcher.devstack import private_redis, redis_answers, take_ending_signals
from emulator import EmulatorServer, EmulatorState, running_emulator
from emulator.testing import TEST_API_KEY
from tests.services import ROOT, Worker

# The suite starts hundreds of Python processes (workers, pollers, emulators). Where
# PYTHONDONTWRITEBYTECODE is set, each compiled toolfan again and every run rewrote and
# compiled each test module (make test-fast's collection took 19 s instead of 9, its run
# 75 s instead of 60 on a 2-core machine). The tests keep their bytecode, in the
# __pycache__ folders git ignores: from the test modules on (they are imported after this
# file), and in every process the suite starts, which inherits the environment.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

#: CI replays the same examples every run, so a property test cannot fail one run by luck;
#: local runs keep exploring new ones.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

_stack = contextlib.ExitStack()
#: A tool queue no test worker consumes, for calls that must wait past their deadline.
UNSERVED_QUEUE = "fn.unserved"
#: A tool queue only a test's own worker consumes (one with settings of its own).
PRIVATE_QUEUE = "fn.private"
#: Served only by the threads worker of the inline calls' tests.
INLINE_QUEUE = "fn.inline"
#: Served only by the model workers of the tool loop's tests (which kill them).
MODEL_QUEUE = "toolfan.model"
TEST_HANDLERS = "handlers.examples,tests.tools"


_RABBITMQ_MISSING: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        choices=("redis", "rabbitmq"),
        default="redis",
        help="message broker of the test workers; results and the ledger stay in Redis",
    )


def amqp_url() -> str:
    """The suite's RabbitMQ: ``TOOLFAN_TEST_AMQP_URL``, or the local one."""
    return os.environ.get("TOOLFAN_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def amqp_problem(url: str) -> str | None:
    """Why RabbitMQ at ``url`` cannot be used, or None when it answers."""
    try:
        with Connection(url, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as exc:
        return f"RabbitMQ does not answer at {url}: {exc}"
    return None


def _broker_url(config: pytest.Config, redis_base: str) -> str:
    if config.getoption("--broker") == "redis":
        return f"{redis_base}/14"
    url = amqp_url()
    problem = amqp_problem(url)
    if problem is not None:
        if os.environ.get("CI"):
            pytest.exit(problem, returncode=1)
        _RABBITMQ_MISSING.append(f"{problem} (set CI to fail instead)")
    return url


#: Directories whose tests start stacks of their own or run for long: ``slow`` unless a
#: module there is marked ``quick`` (``make test-fast`` runs what is not ``slow``).
SLOW_DIRS = frozenset({"bench", "chaos", "e2e", "faults", "fuzz", "ops"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in SLOW_DIRS and item.get_closest_marker("quick") is None:
            item.add_marker(pytest.mark.slow)
    for reason in _RABBITMQ_MISSING:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=reason))


def _test_redis() -> str:
    """The base URL of the Redis the suite may flush: its own, or the one it is given.

    A developer's Redis (or CI's shared one) is never flushed by accident: unless
    ``TOOLFAN_TEST_REDIS_URL`` names a server for the suite, it starts a private
    ``redis-server`` for the session, and every stack inside it (runs, chaos, fuzz,
    the quick bench) uses that one's databases. Several test processes (``-n``) each
    start their own; with a named server the suite runs in one process.
    """
    named = os.environ.get("TOOLFAN_TEST_REDIS_URL")
    if not named:
        return _stack.enter_context(private_redis())
    if not redis_answers(named):
        pytest.exit(f"TOOLFAN_TEST_REDIS_URL={named} does not answer", returncode=1)
    return named.rsplit("/", 1)[0] if named.count("/") > 2 else named


def _controller_checks() -> None:
    """What the controller of several test processes checks; it runs no test itself.

    Each test process starts its own Redis in its own ``pytest_configure``, so the
    controller starts none. Every test process flushes databases 14 and 15 of the Redis
    it uses: processes sharing one named server would empty each other's ledger mid-test,
    so that is refused here, before any test process starts.
    """
    named = os.environ.get("TOOLFAN_TEST_REDIS_URL")
    if named:
        pytest.exit(
            f"TOOLFAN_TEST_REDIS_URL={named} is one server for every test process; "
            "run the suite in one process (-n 0) with it, or unset it so that each "
            "process starts its own",
            returncode=4,
        )


def _exit_session(signum: int) -> NoReturn:
    """End the session as Ctrl-C does: through its teardown, which stops its services.

    By default SIGTERM or SIGHUP kills the pytest process at once, and every worker,
    emulator and ``redis-server`` the tests started lives on, orphaned (``timeout``, a CI
    runner cancelling a job, a closed terminal). :func:`pytest.exit` ends the session
    through its fixtures' teardown instead (a ``SystemExit`` raised in a test would only
    fail that test).
    """
    pytest.exit(f"stopped by {signal.Signals(signum).name}", returncode=128 + signum)


def pytest_configure(config: pytest.Config) -> None:
    take_ending_signals(_exit_session)
    processes = 0 if os.environ.get("PYTEST_XDIST_WORKER") else _processes(config)
    if processes:
        _controller_checks()
        return
    base = _test_redis()
    tmp = Path(_stack.enter_context(tempfile.TemporaryDirectory(prefix="toolfan-tests-")))
    os.environ.update(
        TOOLFAN_REDIS_URL=f"{base}/15",
        TOOLFAN_BROKER_URL=_broker_url(config, base),
        TOOLFAN_HANDLERS=TEST_HANDLERS,
        TOOLFAN_EXAMPLES_DB=str(tmp / "examples.sqlite3"),
        TOOLFAN_TEST_TMP=str(tmp),
    )


def _processes(config: pytest.Config) -> int:
    """How many test processes pytest-xdist starts (``-n``; 0 without it)."""
    value = getattr(config.option, "numprocesses", None)
    return value if isinstance(value, int) else 1 if value else 0


def pytest_unconfigure(config: pytest.Config) -> None:
    _stack.close()


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """The results/ledger database, flushed before the test."""
    client = redis.Redis.from_url(os.environ["TOOLFAN_REDIS_URL"], decode_responses=True)
    client.flushdb()
    yield client
    client.close()


def worker_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorServer]:
    """The Agents API emulator on a free port, for the whole session (reset per test)."""
    with running_emulator() as server:
        os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=TEST_API_KEY)
        yield server


@pytest.fixture
def api(emulator: EmulatorServer, redis_client: redis.Redis) -> EmulatorState:
    """The emulator's state, emptied, with the ledger flushed too."""
    emulator.state.reset()
    return emulator.state


@pytest.fixture(scope="session")
def worker(emulator: EmulatorServer) -> Iterator[Worker]:
    """One prefork worker with two processes on every queue, shared by the session."""
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / "worker.log"
    from tasks import app
    from tasks.queues import all_queues  # after pytest_configure has set the environment
    from tasks.settings import load_registry

    app.control.purge()  # messages a previous run left behind would only add noise
    queues = [
        q
        for q in all_queues(load_registry())
        if q not in (UNSERVED_QUEUE, PRIVATE_QUEUE, INLINE_QUEUE, MODEL_QUEUE)
    ]
    w = Worker(
        [
            "-c",
            "2",
            "-P",
            "prefork",
            "-n",
            "test@%h",
            "--without-mingle",
            "--without-gossip",
            "-Q",
            ",".join(queues),
        ],
        log,
        worker_env(TOOLFAN_API_TIMEOUT="2"),
    )
    try:
        w.wait_ready()
        yield w
    finally:
        w.stop()
        keep = os.environ.get("TOOLFAN_KEEP_WORKER_LOG")  # a path: keep the log to debug
        if keep:
            shutil.copy(log, keep)
