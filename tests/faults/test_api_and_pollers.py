"""Fault matrix, part 2: API timeouts, racing and dying pollers, and deadlines."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from emulator import function_call
from tests.e2e.harness import (
    Seeded,
    answered,
    check_exactly_once,
    check_posted_once,
    poll_loop,
    poller_processes,
    seed,
)
from tests.services import ROOT, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def test_api_connection_timeouts_are_retried_with_the_same_key(api, redis_client):
    # Workers wait 2 s for an answer (TOOLFAN_API_TIMEOUT in tests/conftest.py).
    api.set_faults(latency=3.0, endpoints={"events"})
    seeded = seed(api, 3)
    with poll_loop():
        wait_for(lambda: len(api.requests("/events", method="POST")) >= 3, 30, "timeouts")
        api.set_faults()
        wait_for(lambda: answered(api, seeded), 90, "answers")
        time.sleep(1)
    check_exactly_once(api, seeded, redis_client)
    for sid in seeded.calls:
        keys = {r.idempotency_key for r in api.requests(f"/{sid}/events", method="POST")}
        assert len(keys) == 1


def test_two_pollers_and_beat_racing(api, redis_client, tmp_path):
    seeded = seed(api, 30)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLFAN_POLL_INTERVAL": "0.2"}
    beat = subprocess.Popen(
        [sys.executable, "-m", "dispatcher.cli", "beat", "-s", str(tmp_path / "beat")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with poller_processes(2, 0.1):
            wait_for(lambda: answered(api, seeded), 120, "answers")
            time.sleep(1.0)
    finally:
        beat.terminate()
        beat.wait(20)
    check_exactly_once(api, seeded, redis_client)
    check_posted_once(api, seeded)


def test_poller_sigkilled_mid_dispatch_is_recovered(api, redis_client):
    seeded = seed(api, 120)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOOLFAN_QUEUE_BUDGET": "1",
        "TOOLFAN_TIME_LIMIT_GRACE": "1",
    }
    doomed = subprocess.Popen(
        [sys.executable, "-m", "dispatcher.cli", "poll", "--once"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: redis_client.keys("toolfan:v2:agents:claim:*"), 30, "the first claims")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    claimed = len(redis_client.keys("toolfan:v2:agents:dispatch:*"))
    assert 0 < claimed < len(seeded.calls), "the poller was not killed mid-dispatch"
    with poll_loop():
        wait_for(lambda: answered(api, seeded), 120, "answers after the leases ran out")
        time.sleep(1.0)
    check_exactly_once(api, seeded, redis_client)


def test_redis_outage_fails_poll_cleanly_and_next_run_recovers(api, redis_client):
    seeded = seed(api, 2)
    down = subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", "poll", "--once"],
        cwd=ROOT,
        env={**os.environ, "TOOLFAN_REDIS_URL": "redis://127.0.0.1:9/0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The start check finds Redis down before the pass: one line naming the setting.
    assert down.returncode == 2
    assert down.stderr.startswith("toolfan: cannot start: TOOLFAN_REDIS_URL: redis://127.0.0.1:9")
    assert len(down.stderr.strip().splitlines()) == 1
    assert api.requests("/events") == []
    again = subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", "poll", "--once"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    wait_for(lambda: answered(api, seeded), 60, "answers")
    check_exactly_once(api, seeded, redis_client)


def test_calls_stuck_in_a_queue_are_answered_with_timeouts_before_expiry(
    api, redis_client, monkeypatch
):
    from dispatcher.poll import Poller
    from tasks.ledger import CallRef
    from tasks.runtime import get_ledger
    from tasks.settings import Settings, get_settings
    from tests.e2e.harness import client

    settings = Settings(
        **{**get_settings().model_dump(), "action_expiry": 6.0, "expiry_margin": 1.0}
    )
    key = uuid.uuid4().hex
    stuck = function_call("unserved", {}, turn_id="turn_1")  # no worker consumes its queue
    fine = function_call("count", {"key": key}, turn_id="turn_1")
    sid = api.create_session([stuck, fine])["id"]
    p = Poller(client(), get_ledger("agents"), settings)
    started = time.time()
    first = p.poll_once()
    assert first.calls_dispatched == 2
    done = CallRef(sid, fine["turn_id"], fine["call_id"])
    wait_for(
        lambda: getattr(get_ledger("agents").record(done), "result", None), 5, "the served call"
    )
    summary = wait_for(lambda: (s := p.poll_once()).calls_expired and s, 10, "the expiry")
    assert summary.calls_expired == 1
    wait_for(lambda: api.batches(sid), 30, "the batch")
    assert time.time() - started < 6.0
    events = {e["call_id"]: e for e in api.batches(sid)[0].events}
    assert events[fine["call_id"]]["output"] == "1"
    assert events[stuck["call_id"]]["success"] is False
    assert (
        "did not finish before the session's pending actions expire"
        in (events[stuck["call_id"]]["error"])
    )
    check_exactly_once(api, Seeded(calls={sid: [stuck, fine]}, counters=[key]), redis_client)
