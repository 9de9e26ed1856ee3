"""The execute task on a real prefork worker process, over a real Redis broker."""

import json
import os
import signal
import uuid

import psutil
import pytest
import redis
from celery import chord

from tasks import app
from tasks.config import usable_cpus
from tests.calls import agents_call
from tests.services import wait_for
from tests.tools import collect

pytestmark = [pytest.mark.usefixtures("worker"), pytest.mark.slow]


def new_session() -> str:
    return f"sess_{uuid.uuid4().hex[:10]}"


def broker_client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TOOLFAN_BROKER_URL"])


def test_worker_consumes_every_function_queue_and_the_control_queues():
    replies = app.control.inspect(timeout=1.5).active_queues() or {}
    assert replies, "the worker did not answer"
    queues = {q["name"] for qs in replies.values() for q in qs}
    assert {"fn.add", "fn.count", "fn.get_weather", "toolfan.submit", "toolfan.poll"} <= queues


def test_execute_routes_runs_and_returns(redis_client):
    result = agents_call(new_session(), "turn_1", "call_1", "add", {"a": 2, "b": 3}).apply_async()
    payload = result.get(timeout=30)
    assert payload["success"] is True and payload["output"] == "5"
    assert payload["call_id"] == "call_1" and payload["name"] == "add"


def test_a_positional_message_of_the_previous_version_still_runs(redis_client):
    """A message queued before an upgrade names its ids by position: an Agents call."""
    from tasks.execute import execute
    from tasks.ledger import CallRef
    from tasks.runtime import get_ledger

    session = new_session()
    legacy = execute.si(session, "turn_1", "call_1", "add", {"a": 2, "b": 3})
    payload = legacy.set(queue="fn.add").apply_async().get(timeout=30)
    assert payload["output"] == "5" and payload["batch_id"] == session
    record = get_ledger("agents").record(CallRef(session, "turn_1", "call_1"))
    assert record is not None and record.state == "done"


def test_redelivered_execute_returns_saved_result_and_runs_once(redis_client):
    session, key = new_session(), uuid.uuid4().hex
    first = agents_call(session, "turn_1", "call_1", "count", {"key": key}).apply_async()
    assert first.get(timeout=30)["output"] == "1"
    # The same call delivered again (a redelivery after a lost ack looks exactly like this).
    again = agents_call(session, "turn_1", "call_1", "count", {"key": key}).apply_async()
    assert again.get(timeout=30) == first.get()
    assert redis_client.get(f"test:runs:{key}") == "1"
    # A different call of the same function does run.
    other = agents_call(session, "turn_1", "call_2", "count", {"key": key}).apply_async()
    assert other.get(timeout=30)["output"] == "2"


def _kill_mid_call(redis_client, name: str) -> tuple[dict, str]:
    session, key = new_session(), uuid.uuid4().hex
    result = agents_call(
        session, "turn_1", "call_1", name, {"key": key, "seconds": 20}
    ).apply_async()
    pid = wait_for(lambda: redis_client.get(f"test:pid:{key}"), 30, "the tool to start")
    os.kill(int(pid), signal.SIGKILL)
    return result.get(timeout=60), key


def test_sigkilled_non_idempotent_call_is_not_rerun_blindly(redis_client):
    payload, key = _kill_mid_call(redis_client, "charge")
    assert payload["success"] is False
    assert payload["outcome"] == "outcome_unknown"
    assert payload["error"] == "Function 'charge' may already have run; its outcome is unknown"
    assert redis_client.get(f"test:runs:{key}") == "1"


def test_sigkilled_non_idempotent_call_uses_reconcile(redis_client):
    payload, key = _kill_mid_call(redis_client, "charge_reconciled")
    assert payload["success"] is True
    assert payload["output"] == '{"reconciled":true,"runs":1}'
    assert redis_client.get(f"test:runs:{key}") == "1"


def test_chord_reaches_callback_when_a_handler_raises(redis_client):
    session, key = new_session(), uuid.uuid4().hex
    calls = [
        ("call_a", "add", {"a": 1, "b": 1}),
        ("call_b", "boom", {}),
        ("call_c", "count", {"key": key}),
        ("call_d", "no_such_function", {}),
        ("call_e", "add", "{not json"),
    ]
    header = [agents_call(session, "turn_1", cid, name, args) for cid, name, args in calls]
    results = chord(header)(collect.s().set(queue="toolfan.submit")).get(timeout=60)
    assert [r["call_id"] for r in results] == [c[0] for c in calls]
    assert [r["success"] for r in results] == [True, False, True, False, False]
    assert results[1]["error"] == "Function 'boom' failed: RuntimeError: kaboom"
    assert results[3]["outcome"] == "unknown_function"
    assert results[4]["outcome"] == "invalid_arguments"


def test_toolfan_worker_runs_on_a_gevent_pool(tmp_path, redis_client):
    """-P gevent patches the standard library before toolfan opens any socket.

    The calls go to fn.unserved, which only this worker consumes.
    """
    from tests.conftest import UNSERVED_QUEUE, worker_env
    from tests.services import Worker

    gevent_worker = Worker(
        [
            "-P",
            "gevent",
            "-c",
            "64",
            "-n",
            "gevent@%h",
            "-Q",
            UNSERVED_QUEUE,
            "--without-mingle",
            "--without-gossip",
        ],
        tmp_path / "gevent.log",
        worker_env(),
    )
    try:
        gevent_worker.wait_ready()
        results = [
            agents_call(
                new_session(), "turn_1", f"call_{i}", "unserved", {"seconds": 0.3}
            ).apply_async()
            for i in range(60)
        ]
        payloads = [r.get(timeout=30) for r in results]
        # acks_late: every greenlet acks its own message, all at nearly the same moment.
        # Only this queue's entries count: a worker an earlier test killed may have left
        # its own messages in the shared hash.
        wait_for(lambda: not _unacked_on(UNSERVED_QUEUE), 10, "every message acked")
    finally:
        gevent_worker.stop()
    assert [p["output"] for p in payloads] == ["never"] * 60
    assert "(gevent)" in gevent_worker.log()
    assert "Couldn't ack" not in gevent_worker.log()


def _unacked_on(queue: str) -> int:
    """How many of the broker's unacknowledged messages were routed to ``queue``."""
    entries = broker_client().hvals("unacked")
    return sum(1 for raw in entries if json.loads(raw)[2] == queue)


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, 2 * usable_cpus()),
        ([], {"TOOLFAN_WORKER_CONCURRENCY": "3"}, 3),
        (["-c", "1"], {"TOOLFAN_WORKER_CONCURRENCY": "3"}, 1),
    ],
    ids=["default", "setting", "flag"],
)
def test_a_prefork_worker_starts_two_processes_per_usable_cpu_unless_told(
    tmp_path, args, env, expected
):
    """Calls mostly wait (ledger, API, the tool's own I/O): two processes per CPU keep the
    cores busy. ``TOOLFAN_WORKER_CONCURRENCY`` sets another size, and ``-c`` beats both.

    The worker consumes only fn.unserved, so it takes no other test's work.
    """
    from tests.conftest import UNSERVED_QUEUE, worker_env
    from tests.services import Worker

    worker = Worker(
        [*args, "-n", "sized@%h", "-Q", UNSERVED_QUEUE, "--without-mingle", "--without-gossip"],
        tmp_path / "sized.log",
        {**worker_env(), **env},
    )
    try:
        worker.wait_ready()
        children = psutil.Process(worker.proc.pid).children()
    finally:
        worker.stop()
    assert len(children) == expected
    assert f"concurrency: {expected} (prefork)" in worker.log()
