"""The three triggers of a poll: cron's --once (see test_poll_e2e), the loop, and beat."""

import os
import signal
import subprocess
import sys

import pytest

from tests.e2e.harness import answered, check_exactly_once, seed
from tests.services import ROOT, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def start(*args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_interval_loop_answers_and_stops_cleanly_on_sigterm(api, redis_client):
    seeded = seed(api, 5)
    loop = start("poll", "--interval", "0.2")
    try:
        wait_for(lambda: answered(api, seeded), 60, "answers")
    finally:
        loop.send_signal(signal.SIGTERM)
        out, _ = loop.communicate(timeout=20)
    assert loop.returncode == 0
    assert out.splitlines()[0].startswith("poll: 5 sessions seen")
    assert out.splitlines()[-1] == "poll: stopped"
    check_exactly_once(api, seeded, redis_client)


def test_beat_sends_poll_tasks_that_answer_sessions(api, redis_client, tmp_path):
    seeded = seed(api, 5)
    beat = start(
        "beat",
        "-s",
        str(tmp_path / "schedule"),
        "--loglevel",
        "INFO",
        TOOLFAN_POLL_INTERVAL="0.5",
    )
    try:
        wait_for(lambda: answered(api, seeded), 60, "answers from beat-triggered polls")
    finally:
        beat.send_signal(signal.SIGTERM)
        out, _ = beat.communicate(timeout=20)
    assert "Sending due task toolfan-poll (toolfan.poll)" in out
    check_exactly_once(api, seeded, redis_client)
