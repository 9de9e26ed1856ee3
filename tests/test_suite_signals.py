"""A test run ended by SIGTERM or SIGHUP stops the workers and the Redis it started.

Killed at once (the signals' default), pytest would leave every service of its fixtures
running, orphaned: a CI job cancelled, ``timeout`` running out, a terminal closed.
Each case runs a whole pytest that starts a worker (about 11 s), so ``make test-fast``
leaves them to ``make test``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.services import ROOT, default_endings, wait_for

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its parent has not reaped it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP])
def test_an_ending_signal_stops_the_run_and_its_services(tmp_path: Path, ending: int) -> None:
    at = tmp_path / "stopped.json"
    env = {**os.environ, "TOOLFAN_TEST_STOPPED_AT": str(at)}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST", "TOOLFAN_TEST_REDIS_URL"):
        env.pop(name, None)  # its own run, with its own private Redis
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
    with subprocess.Popen(
        [*argv, "tests/suite_stopped.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_endings,  # as a terminal starts it, whatever this run inherited
    ) as run:
        try:
            wait_for(lambda: at.exists() or run.poll() is not None, 90, "the worker to start")
            pids = json.loads(at.read_text())
            assert all(_alive(p) for p in pids.values()), pids
            run.send_signal(ending)
            out, _ = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 128 + ending, out
    assert f"stopped by {signal.Signals(ending).name}" in out
    deadline = time.monotonic() + 10  # the worker's pool processes may lag its reaping
    while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [role for role, pid in pids.items() if _alive(pid)], out
