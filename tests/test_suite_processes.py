"""Test processes never share a Redis they flush (``make test-fast`` runs several), and
keep their bytecode."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.services import ROOT


def test_several_test_processes_refuse_one_named_redis():
    # Each process flushes databases 14 and 15 per test: on one named server they would
    # empty each other's ledger mid-test, so the suite stops before any process starts.
    base = os.environ["TOOLFAN_REDIS_URL"].rsplit("/", 1)[0]
    env = {**os.environ, "TOOLFAN_TEST_REDIS_URL": base}
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*argv, "tests/test_suite_redis.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "run the suite in one process (-n 0)" in done.stdout + done.stderr


def test_the_suite_and_the_processes_it_starts_keep_their_bytecode():
    # Without it each worker, poller and emulator the suite starts compiles toolfan again.
    assert not sys.dont_write_bytecode
    assert not os.environ.get("PYTHONDONTWRITEBYTECODE")
    child = [sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"]
    assert subprocess.run(child, capture_output=True, text=True).stdout == "False\n"
