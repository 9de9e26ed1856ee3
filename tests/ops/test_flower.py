"""``toolfan flower``: real Flower, a real worker, calls read back from Flower's HTTP API.

Flower builds its task list from the workers' events, so it only knows tasks that ran
while it listened: the fixture waits until a probe call shows up before the test's own
calls are sent.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from dispatcher.devstack import Service, free_port, wait_for
from tests.conftest import worker_env
from tests.services import Worker

AUTH = ("operator", "s3cret-pass")


def execute(session_id: str, call_id: str, name: str, arguments: dict[str, Any]) -> str:
    """Run one execute task through the worker; its task id."""
    from tests.calls import agents_call

    result = agents_call(session_id, "turn_1", call_id, name, arguments).apply_async()
    assert result.get(timeout=30)["success"] is True
    return str(result.id)


def flower_tasks(client: httpx.Client) -> dict[str, dict[str, Any]]:
    response = client.get("/api/tasks")
    response.raise_for_status()
    tasks: dict[str, dict[str, Any]] = response.json()
    return tasks


def probe_seen(client: httpx.Client) -> bool:
    """Run a probe call and give Flower two seconds to list it.

    Flower starts listening for events a moment after its banner, and events sent before
    that are lost to it: hence a fresh probe each round until one shows up.
    """
    probe = execute(f"probe_{uuid.uuid4().hex}", "call_probe", "add", {"a": 0, "b": 0})
    try:
        wait_for(lambda: probe in flower_tasks(client), 2, "the probe")
    except TimeoutError:
        return False
    return True


@pytest.fixture
def flower(worker: Worker, redis_client: redis.Redis) -> Iterator[httpx.Client]:
    """Flower with basic auth, listening to the test broker; a client with credentials."""
    port = free_port()
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / "flower.log"
    args = ["flower", f"--port={port}", "--address=127.0.0.1", "--basic_auth={}:{}".format(*AUTH)]
    service = Service(args, log, worker_env())
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=AUTH, timeout=10)
    try:
        service.wait_for_output("Visit me at", 60)
        wait_for(lambda: probe_seen(client), 60, "Flower to see task events", interval=0)
        yield client
    finally:
        client.close()
        service.stop()


def test_flower_lists_each_execute_with_function_session_and_call(flower: httpx.Client):
    session_id = f"sess_{uuid.uuid4().hex}"
    calls = {
        "call_a": ("add", {"a": 1, "b": 2}),
        "call_b": ("add", {"a": 3, "b": 4}),
        "call_w": ("get_weather", {"city": "Paris"}),
    }
    ids = {execute(session_id, call_id, *call): call_id for call_id, call in calls.items()}

    def all_succeeded() -> dict[str, dict[str, Any]] | None:
        tasks = flower_tasks(flower)
        seen = {i: tasks[i] for i in ids if i in tasks}
        done = len(seen) == len(ids) and all(t["state"] == "SUCCESS" for t in seen.values())
        return seen if done else None

    seen = wait_for(all_succeeded, 30, "Flower to list every call as SUCCESS")
    for task_id, task in seen.items():
        call_id = ids[task_id]
        function = calls[call_id][0]
        assert task["name"] == "toolfan.execute"
        # Flower shows the call's ids and function; argument values stay out.
        shown = f"{task['args']} {task['kwargs']}"
        for value in (session_id, "turn_1", call_id, function):
            assert repr(value) in shown, (value, shown)
        assert "<arguments hidden>" in shown and "Paris" not in shown
        assert task["worker"].startswith("test@")


def test_flower_refuses_requests_without_credentials(flower: httpx.Client):
    base = flower.base_url
    assert httpx.get(base.join("/api/tasks")).status_code == 401
    assert httpx.get(base.join("/api/tasks"), auth=("operator", "wrong")).status_code == 401
    assert httpx.get(base.join("/")).status_code == 401
    # The health check stays open, for load balancers and Kubernetes probes.
    health = httpx.get(base.join("/healthcheck"))
    assert (health.status_code, health.text) == (200, "OK")


def test_flower_takes_basic_auth_from_the_environment(tmp_path: Path):
    # systemd and Kubernetes pass FLOWER_BASIC_AUTH as a variable, not a flag, to keep the
    # password off the command line: Flower must honour it by itself.
    port = free_port()
    env = worker_env(FLOWER_BASIC_AUTH="{}:{}".format(*AUTH))
    service = Service(["flower", f"--port={port}", "--address=127.0.0.1"], tmp_path / "fl", env)
    try:
        service.wait_for_output("Visit me at", 60)
        url = f"http://127.0.0.1:{port}/api/tasks"
        wait_for(lambda: httpx.get(url, auth=AUTH).status_code == 200, 30, "Flower to answer")
        assert httpx.get(url).status_code == 401
    finally:
        service.stop()


def test_flower_shows_outcomes_and_sizes_never_outputs_or_tokens(flower: httpx.Client, api):
    from emulator import function_call
    from tasks.runtime import get_ledger
    from tests.e2e.harness import poll_loop

    secret = f"output-{uuid.uuid4().hex}"
    sid = api.create_session([function_call("echo", {"text": secret}, turn_id="t", call_id="c")])[
        "id"
    ]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 30, "the batch")
    token = get_ledger("agents").dispatch(sid).token

    def both_listed() -> list[dict[str, Any]] | None:
        tasks = [t for t in flower_tasks(flower).values() if sid in f"{t['args']}{t['kwargs']}"]
        names = {t["name"] for t in tasks}
        done = all(t["state"] == "SUCCESS" for t in tasks)
        return tasks if names == {"toolfan.execute", "toolfan.submit"} and done else None

    tasks = wait_for(both_listed, 30, "Flower to list the execute and the submit")
    shown = " ".join(f"{t['args']} {t['kwargs']} {t.get('result')}" for t in tasks)
    assert secret not in shown and token not in shown, shown
    execute_task = next(t for t in tasks if t["name"] == "toolfan.execute")
    assert "outcome=ok" in execute_task["result"]
    assert f"output_chars={len(secret)}" in execute_task["result"]
    submit_task = next(t for t in tasks if t["name"] == "toolfan.submit")
    assert "<results of 1 call(s)>" in submit_task["args"]
