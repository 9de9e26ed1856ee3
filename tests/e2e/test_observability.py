"""Metrics and logs of a real worker and poller: counts add up, secrets never appear."""

import json
import re
import time
import urllib.request

import pytest
import redis

from dispatcher.devstack import Service, free_port
from emulator import function_call
from tests.conftest import worker_env
from tests.services import Worker, wait_for

API_KEY = "sk-test-VERYSECRET-123"
REDIS_PASSWORD = "hunter2pw"
ARG_VALUE = "ARGVALUE-do-not-log"
SESSIONS = 5


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


@pytest.fixture
def observed(api, tmp_path, emulator):
    base = re.sub(r"/\d+$", "", emulator_redis_url())
    url = base.replace("redis://", f"redis://default:{REDIS_PASSWORD}@")
    redis.Redis.from_url(f"{base}/9").flushdb()
    redis.Redis.from_url(f"{base}/10").flushdb()
    worker_port, poller_port = free_port(), free_port()
    env = worker_env(
        TOOLFAN_REDIS_URL=f"{url}/9",
        TOOLFAN_BROKER_URL=f"{url}/10",
        OPENAI_API_KEY=API_KEY,
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
        TOOLFAN_LOG_FORMAT="json",
    )
    worker = Worker(
        ["-c", "2", "-n", "obs@%h", "--without-mingle", "--without-gossip"],
        tmp_path / "worker.log",
        {**env, "TOOLFAN_METRICS_PORT": str(worker_port)},
    )
    poller = Service(
        ["poll", "--interval", "0.2", "-v"],
        tmp_path / "poller.log",
        {
            **env,
            "TOOLFAN_METRICS_PORT": str(poller_port),
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "poller-metrics"),
        },
    )
    try:
        worker.wait_ready()
        yield worker, poller, worker_port, poller_port
    finally:
        poller.stop()
        worker.stop()


def emulator_redis_url() -> str:
    import os

    return os.environ["TOOLFAN_REDIS_URL"]


def test_metrics_count_every_outcome_and_logs_are_json_without_secrets(api, observed):
    worker, poller, worker_port, poller_port = observed
    for _ in range(SESSIONS):
        api.create_session(
            [
                function_call("add", {"a": 1, "b": 2}),
                function_call("boom", {}),
                function_call("add", {"a": ARG_VALUE, "b": 1}),
                function_call("launch_rockets", {}),
            ]
        )
    wait_for(lambda: len(api.batches()) == SESSIONS, 60, "every session answered")

    def settled() -> dict[str, float] | None:
        m = scrape(worker_port)
        return m if m.get('toolfan_submit_attempts_total{status="202"}') == SESSIONS else None

    m = wait_for(settled, 20, "the submit metrics")
    assert m['toolfan_calls_total{function="add",outcome="ok"}'] == SESSIONS
    assert m['toolfan_calls_total{function="add",outcome="invalid_arguments"}'] == SESSIONS
    assert m['toolfan_calls_total{function="boom",outcome="exception"}'] == SESSIONS
    assert m['toolfan_calls_total{function="<unknown>",outcome="unknown_function"}'] == SESSIONS
    assert m['toolfan_call_duration_seconds_count{function="add"}'] == 2 * SESSIONS
    assert m["toolfan_time_to_submit_seconds_count"] == SESSIONS
    assert m["toolfan_ledger_errors_total"] == 0  # exported, and zero on a healthy run
    p = scrape(poller_port)
    assert p["toolfan_poll_duration_seconds_count"] >= 1
    assert "toolfan_sessions_pending" in " ".join(p)

    time.sleep(0.5)
    worker.stop()
    poller.stop()
    logs = worker.log() + poller.log()
    for secret in (API_KEY, REDIS_PASSWORD, ARG_VALUE):
        assert secret not in logs, f"{secret!r} leaked into the logs"
    lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    calls = [r for r in lines if r.get("logger") == "toolfan.execute" and "elapsed_ms" in r]
    assert len(calls) == 4 * SESSIONS
    # One line per submitted batch, toolfan's; not a second one from the HTTP client.
    submits = [r for r in lines if r.get("logger") == "toolfan.submit"]
    assert sum("submitted" in r["message"] for r in submits) == SESSIONS
    assert not [r for r in lines if r.get("logger") == "httpx"]
    # Nor Celery's own line per task ("received", "succeeded"): toolfan's line is the record.
    assert not [
        r for r in lines if r.get("logger", "").startswith("celery.") and "Task " in r["message"]
    ]
    ok = next(r for r in calls if r["outcome"] == "ok")
    assert {"session_id", "turn_id", "call_id", "function", "elapsed_ms", "output_chars"} <= set(ok)
    assert ok["function"] == "add" and ok["output_chars"] == 1 and ok["source"] == "agents"
