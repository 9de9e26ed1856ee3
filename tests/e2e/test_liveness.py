"""A worker that dies hard costs seconds, not minutes, with default budgets.

Two private workers serve ``fn.private``; a test SIGKILLs the whole process group of the
one running a call. On Redis, the dead worker's message would come back only at the
visibility timeout (an hour) and the session would wait for its claim's lease (390 s with
the defaults); now the reaper puts it back once the worker has missed its heartbeats for
``TOOLFAN_DEAD_AFTER`` (10 s). On RabbitMQ the broker gives it back when the connection
drops. These tests run on both brokers (``make test`` runs tests/e2e on each).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator import function_call
from tasks.ledger import CallRef
from tasks.runtime import get_ledger
from tests.chaos.stack import proc_children
from tests.conftest import PRIVATE_QUEUE
from tests.e2e.harness import poll_loop, poller
from tests.e2e.private import lose_message_of, on_redis, private_worker
from tests.services import Worker, wait_for

pytestmark = pytest.mark.usefixtures("worker")

#: The default TOOLFAN_DEAD_AFTER, and what a rerun may take beyond it.
DEAD_AFTER, SLACK = 10.0, 5.0


@pytest.fixture
def pair(tmp_path: Path, request) -> Iterator[list[Worker]]:
    env = getattr(request, "param", {})
    workers = [private_worker(tmp_path, name, **env) for name in ("alpha", "beta")]
    try:
        for w in workers:
            w.wait_ready()
        yield workers
    finally:
        for w in workers:
            w.stop()


def runner_of(workers: list[Worker], redis_client, key: str) -> Worker:
    """The worker whose pool process runs the call counted under ``key``."""
    pid = int(wait_for(lambda: redis_client.get(f"test:pid:{key}"), 30, "the call to start"))
    return next(w for w in workers if pid in proc_children(w.proc.pid))


def kill_group(worker: Worker) -> float:
    """SIGKILL a worker's main and pool processes at once, as an OOM kill or node loss does."""
    os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait(10)
    return time.monotonic()


def runs(redis_client, key: str) -> int:
    return int(redis_client.get(f"test:runs:{key}") or 0)


# The visibility timeout is cut to 100 s (grace to 5 s, so the longest test tool, 45 s,
# fits under half of it): long enough to outlast the rerun, short enough to see it would
# not redeliver again.
SHORT_VT = {"TOOLFAN_VISIBILITY_TIMEOUT": "100", "TOOLFAN_TIME_LIMIT_GRACE": "5"}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("pair", [SHORT_VT], indirect=True)
def test_a_call_on_a_killed_worker_runs_again_within_seconds(api, redis_client, pair):
    key = uuid.uuid4().hex
    sid = api.create_session([function_call("private_slow", {"key": key, "seconds": 20})])["id"]
    with poll_loop():
        victim = runner_of(pair, redis_client, key)
        sent = time.monotonic()
        killed = kill_group(victim)
        wait_for(lambda: runs(redis_client, key) == 2, DEAD_AFTER + SLACK + 5, "the rerun", 0.1)
        rerun_after = time.monotonic() - killed
        wait_for(lambda: api.batches(sid), 60, "the answer", 0.2)
    print(f"the call ran again {rerun_after:.1f} s after its worker was killed")
    assert rerun_after <= DEAD_AFTER + SLACK, f"rerun {rerun_after:.1f} s after the kill"
    assert [e["output"] for e in api.batches(sid)[0].events] == ["2"]
    if on_redis():  # past the visibility timeout, the message must not come a third time
        time.sleep(max(0.0, sent + 105 - time.monotonic()))
        assert runs(redis_client, key) == 2
        assert len(api.batches(sid)) == 1
    status = get_ledger("agents").client.get("toolfan:orphans:redone")
    assert on_redis() == bool(status and int(status) >= 1)


@pytest.mark.timeout(180)
def test_a_non_idempotent_call_on_a_killed_worker_is_reconciled(api, redis_client, pair):
    key = uuid.uuid4().hex
    sid = api.create_session([function_call("private_charge", {"key": key, "seconds": 20})])["id"]
    with poll_loop():
        kill_group(runner_of(pair, redis_client, key))
        wait_for(lambda: api.batches(sid), DEAD_AFTER + SLACK + 10, "the answer", 0.2)
    assert api.batches(sid)[0].events[0]["output"] == '{"reconciled":true,"runs":1}'
    assert runs(redis_client, key) == 1


@pytest.mark.timeout(180)
def test_a_slow_live_call_is_never_redone_even_if_its_message_comes_again(api, redis_client, pair):
    key = uuid.uuid4().hex
    call = function_call("private_long", {"key": key, "seconds": 30})
    sid = api.create_session([call])["id"]
    with poll_loop():
        runner = runner_of(pair, redis_client, key)
        if on_redis():  # hand its message to the other worker too, as a redelivery would
            time.sleep(1.0)
            assert _redeliver_to_the_other(sid)
        wait_for(lambda: api.batches(sid), 60, "the answer", 0.2)
    assert runs(redis_client, key) == 1, "a live call ran twice"
    assert api.batches(sid)[0].events[0]["output"] == "1"
    assert runner.proc.poll() is None
    record = get_ledger("agents").record(CallRef(sid, *_only_call(api, sid)))
    assert record is not None and record.state == "submitted"


@pytest.mark.timeout(180)
def test_a_busy_worker_holds_only_the_call_it_runs(api, redis_client, tmp_path):
    """Nothing waits reserved-but-unstarted behind a running call, so a death strands none.

    With ``worker_prefetch_multiplier=1`` and late acks a one-process worker takes its next
    message only once it acks the one it runs: the other calls stay ready on the queue, for
    any other worker. The one it held is put back when it dies.
    """
    from tasks.app import app

    keys = [uuid.uuid4().hex for _ in range(3)]
    calls = [function_call("private_slow", {"key": k, "seconds": 6}) for k in keys]
    sid = api.create_session(calls)["id"]
    alpha = private_worker(tmp_path, "alpha")
    beta = None
    try:
        alpha.wait_ready()
        with poll_loop():
            started = wait_for(lambda: [k for k in keys if runs(redis_client, k)], 30, "a start")
            with app.connection_for_write() as conn:
                ready = conn.default_channel.queue_declare(PRIVATE_QUEUE, passive=True)
            assert ready.message_count == 2, "a busy worker reserved a call it had not started"
            kill_group(alpha)
            beta = private_worker(tmp_path, "beta")
            beta.wait_ready()
            wait_for(lambda: api.batches(sid), DEAD_AFTER + SLACK + 3 * 6 + 10, "the answer", 0.2)
    finally:
        for w in (alpha, beta):
            if w is not None:
                w.stop()
    assert len(started) == 1
    assert sorted(runs(redis_client, k) for k in keys) == [1, 1, 2]
    assert len(api.batches(sid)[0].events) == 3


def _only_call(api, sid: str) -> tuple[str, str]:
    event = api.batches(sid)[0].events[0]
    return event["turn_id"], event["call_id"]


def _redeliver_to_the_other(sid: str) -> bool:
    """Put the call's (unacknowledged) message back on its queue, as a redelivery does."""
    from tasks.app import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for tag, raw in channel.client.hgetall(channel.unacked_key).items():
            if sid.encode() in raw:
                channel.qos.restore_by_tag(tag.decode(), client=channel.client)
                return True
    return False


def test_a_call_whose_message_died_with_its_worker_is_dispatched_again(api, redis_client, tmp_path):
    if not on_redis():
        pytest.skip("RabbitMQ keeps a message until a consumer acks it: none is lost this way")

    key = uuid.uuid4().hex
    sid = api.create_session([function_call("private_slow", {"key": key})])["id"]
    assert poller().poll_once().calls_dispatched == 1  # no private worker yet: it waits
    assert lose_message_of(key)
    redis_client.zadd("toolfan:workers", {"ghost@host#1": time.time()})
    worker = private_worker(tmp_path, "late")
    try:
        worker.wait_ready()
        started = time.monotonic()
        with poll_loop():
            wait_for(lambda: api.batches(sid), DEAD_AFTER + SLACK + 5, "the answer", 0.2)
    finally:
        worker.stop()
    assert time.monotonic() - started <= DEAD_AFTER + SLACK + 5
    assert runs(redis_client, key) == 1


def _run_tool_calls(calls: list[dict], conversation_id: str) -> list[dict[str, str]]:
    import toolfan

    return toolfan.run_tool_calls(calls, conversation_id=conversation_id)


def _arun_tool_calls(calls: list[dict], conversation_id: str) -> list[dict[str, str]]:
    import toolfan

    return asyncio.run(toolfan.arun_tool_calls(calls, conversation_id=conversation_id))


@pytest.mark.parametrize("run", [_run_tool_calls, _arun_tool_calls])
def test_a_run_tool_calls_call_whose_message_died_with_its_worker_runs_again(
    redis_client, tmp_path, run
):
    # No poller covers an application's own batch: its waiting caller looks for the loss.
    if not on_redis():
        pytest.skip("RabbitMQ keeps a message until a consumer acks it: none is lost this way")

    key = uuid.uuid4().hex
    call = {"id": "lost", "type": "function"}
    call["function"] = {"name": "private_slow", "arguments": json.dumps({"key": key})}
    answer: list[list[dict[str, str]]] = []
    caller = threading.Thread(target=lambda: answer.append(run([call], key)))
    caller.start()
    wait_for(lambda: lose_message_of(key), 30, "the call's message", 0.01)
    redis_client.zadd("toolfan:workers", {"ghost@host#3": time.time()})
    worker = private_worker(tmp_path, "late")
    try:
        worker.wait_ready()
        started = time.monotonic()
        caller.join(DEAD_AFTER + SLACK + 10)
    finally:
        worker.stop()
    assert not caller.is_alive(), "the caller still waits"
    assert time.monotonic() - started <= DEAD_AFTER + SLACK + 5  # not the 60 s timeout
    assert answer == [[{"role": "tool", "tool_call_id": "lost", "content": "1"}]]
    assert runs(redis_client, key) == 1


def test_a_submit_lost_with_its_worker_is_sent_again(api, redis_client):
    if not on_redis():
        pytest.skip("RabbitMQ keeps a message until a consumer acks it: none is lost this way")
    from tasks.execute import execute_call
    from tasks.ledger import Dispatch
    from tasks.settings import load_registry

    calls = [function_call("add", {"a": 1, "b": 2}, turn_id="t", call_id="c")]
    sid = api.create_session(calls)["id"]
    ledger = get_ledger("agents")
    execute_call(CallRef(sid, "t", "c"), "add", calls[0]["arguments"], ledger, load_registry())
    now = time.time()
    ledger.claim_dispatch(sid, Dispatch("the-dead-chord", now - 30, 600_000, None, now - 30))
    redis_client.zadd("toolfan:workers", {"ghost@host#2": now - 20})  # died after dispatching
    summary = poller().poll_once()
    assert summary.calls_resubmitted == 1
    wait_for(lambda: api.batches(sid), 30, "the batch", 0.2)
    assert api.batches(sid)[0].events[0]["output"] == "3"
