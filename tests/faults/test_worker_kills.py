"""Fault matrix, part 1: worker processes SIGKILLed during execute and during submit."""

import os
import signal
import uuid

import pytest

from emulator import function_call
from tasks import app
from tasks.ledger import SUBMITTED, CallRef
from tasks.runtime import get_ledger
from tests.e2e.harness import Seeded, check_exactly_once, poll_loop
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")


def one_call_session(api, name: str, arguments: dict) -> tuple[Seeded, dict]:
    action = function_call(name, arguments, turn_id="turn_1")
    sid = api.create_session([action])["id"]
    return Seeded(calls={sid: [action]}), action


def kill_pid_from(redis_client, key: str) -> None:
    pid = wait_for(lambda: redis_client.get(f"test:pid:{key}"), 30, "the tool to start")
    os.kill(int(pid), signal.SIGKILL)


def active_pid(task_name: str, session_id: str) -> int | None:
    for tasks in (app.control.inspect(timeout=0.5).active() or {}).values():
        for task in tasks:
            if task["name"] == task_name and session_id in str(task.get("kwargs")) + str(
                task.get("args")
            ):
                return int(task["worker_pid"])
    return None


def test_killed_idempotent_call_reruns_once_and_session_answered_once(api, redis_client):
    key = uuid.uuid4().hex
    seeded, _ = one_call_session(api, "slow_count", {"key": key, "seconds": 3})
    with poll_loop():
        kill_pid_from(redis_client, key)
        wait_for(lambda: api.batches(), 60, "the answer")
    check_exactly_once(api, seeded, {})
    assert redis_client.get(f"test:runs:{key}") == "2"
    assert api.batches()[0].events[0]["output"] == "2"


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            "charge",
            {
                "success": False,
                "error": "Function 'charge' may already have run; its outcome is unknown",
            },
        ),
        ("charge_reconciled", {"success": True, "output": '{"reconciled":true,"runs":1}'}),
    ],
)
def test_killed_non_idempotent_call_is_reconciled_or_reported(api, redis_client, tool, expected):
    key = uuid.uuid4().hex
    seeded, _ = one_call_session(api, tool, {"key": key, "seconds": 20})
    with poll_loop():
        kill_pid_from(redis_client, key)
        wait_for(lambda: api.batches(), 60, "the answer")
    event = api.batches()[0].events[0]
    assert {k: event[k] for k in expected} == expected
    assert redis_client.get(f"test:runs:{key}") == "1"
    check_exactly_once(api, seeded, {})


def test_poison_call_is_failed_after_bounded_attempts_and_others_submitted(api, redis_client):
    key = uuid.uuid4().hex
    poison = function_call("crash", {"key": key}, turn_id="turn_1")
    fine = function_call("add", {"a": 2, "b": 2}, turn_id="turn_1")
    sid = api.create_session([poison, fine])["id"]
    with poll_loop():
        wait_for(lambda: api.batches(), 90, "the answer")
    events = {e["call_id"]: e for e in api.batches(sid)[0].events}
    assert events[fine["call_id"]]["output"] == "4"
    assert events[poison["call_id"]]["success"] is False
    assert events[poison["call_id"]]["error"].startswith("Function 'crash' did not complete in 3")
    assert redis_client.get(f"test:runs:{key}") == "3"


def _kill_submit(api, sid: str) -> None:
    pid = wait_for(lambda: active_pid("toolfan.submit", sid), 30, "submit to be running", 0.1)
    os.kill(pid, signal.SIGKILL)


def test_worker_killed_in_submit_before_the_post_is_answered(api, redis_client):
    api.set_faults(latency=5.0, endpoints={"events"})  # the POST waits before it is applied
    key = uuid.uuid4().hex
    seeded, _ = one_call_session(api, "count", {"key": key})
    sid = next(iter(seeded.calls))
    with poll_loop():
        _kill_submit(api, sid)
        api.set_faults()
        wait_for(lambda: api.batches(), 60, "the answer")
    check_exactly_once(api, seeded, redis_client)
    outcomes = [r.outcome for r in api.requests(f"/{sid}/events", method="POST")]
    assert outcomes.count("accepted") == 1
    assert set(outcomes) <= {"accepted", "disconnected"}


def test_worker_killed_in_submit_after_the_post_is_answered_once(api, redis_client):
    api.set_faults(answer_delay=5.0, endpoints={"events"})  # applied, 202 not yet sent
    key = uuid.uuid4().hex
    seeded, action = one_call_session(api, "count", {"key": key})
    sid = next(iter(seeded.calls))
    with poll_loop():
        _kill_submit(api, sid)
        wait_for(lambda: api.batches(), 10, "the first POST to be applied")
        api.set_faults()
        ref = CallRef(sid, action["turn_id"], action["call_id"])
        wait_for(
            lambda: getattr(get_ledger("agents").record(ref), "state", None) == SUBMITTED,
            60,
            "the ledger to record the submission",
        )
    check_exactly_once(api, seeded, redis_client)
    # the first POST is logged once its delayed answer is done, after the replay's
    posts = wait_for(
        lambda: (
            [*api.requests(f"/{sid}/events", method="POST")][1:]
            and api.requests(f"/{sid}/events", method="POST")
        ),
        15,
        "both POSTs",
    )
    assert len({p.idempotency_key for p in posts}) == 1
    assert sorted(p.outcome for p in posts) == ["accepted", "replayed"]
