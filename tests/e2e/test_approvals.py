"""Approvals end to end: a real worker parks the call, a person decides with the CLI.

Nothing runs before the decision; the batch's other calls run meanwhile, and the batch is
delivered once, with every call in it. The timeout test runs its own worker with
``TOOLFAN_APPROVAL_TIMEOUT=3``: at the default 600 s it would wait ten minutes for what it
checks (the deadline itself is the same code at any length).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from emulator import function_call
from tasks.approvals import approval_id
from tasks.ledger import CallRef
from tasks.runtime import get_ledger
from tests.conftest import PRIVATE_QUEUE, worker_env
from tests.e2e.harness import Seeded, batch_events, check_exactly_once, poll_loop
from tests.e2e.test_webhook_intake import TOKEN, intake  # noqa: F401  # the fixture
from tests.services import ROOT, Worker, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def toolfan(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", *args],
        cwd=ROOT,
        env=worker_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def pending_ids() -> list[str]:
    listed = toolfan("approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line)["id"] for line in listed.stdout.splitlines()]


def asked(call_id: str) -> list[dict]:
    """The pending approvals of calls called ``call_id``."""
    listed = toolfan("approvals", "list", "--json").stdout.splitlines()
    return [a for a in map(json.loads, listed) if a["call_id"] == call_id]


def waiting_for(sid: str, action: dict) -> str:
    """The approval id of ``action``, once its worker asked for it."""
    aid = approval_id("agents", sid, action["turn_id"], action["call_id"])
    wait_for(lambda: aid in pending_ids(), 60, "the approval request")
    return aid


def test_an_approved_call_runs_once_and_goes_out_with_its_batch(api, redis_client):
    key = uuid.uuid4().hex
    gated = function_call("erase", {"key": key}, turn_id="turn_1")
    plain = function_call("add", {"a": 1, "b": 2}, turn_id="turn_1")
    sid = api.create_session([gated, plain])["id"]
    with poll_loop():
        aid = waiting_for(sid, gated)
        ledger = get_ledger("agents")
        wait_for(lambda: ledger.saved(CallRef(sid, "turn_1", plain["call_id"])), 30, "add")
        shown = json.loads(toolfan("approvals", "show", aid).stdout)
        assert (shown["function"], json.loads(shown["arguments"])) == ("erase", {"key": key})
        assert shown["reason"] == "the tool requires it" and shown["state"] == "pending"
        assert api.batches(sid) == [] and redis_client.get(f"test:runs:{key}") is None
        # A person takes longer than a few of the call's 2 s looks at its approval: those
        # looks must count as no attempt (three would make it a poison call), nor hold a
        # process that the approved run would then wait on.
        time.sleep(8)
        record = redis_client.hgetall(ledger.key(CallRef(sid, "turn_1", gated["call_id"])))
        assert (record["state"], record["attempts"], record["worker"]) == (
            "awaiting_approval",
            "0",
            "",
        )
        approved = toolfan("approvals", "approve", aid, "--by", "alice")
        assert approved.returncode == 0 and "approved by alice" in approved.stdout
        answered = batch_events(api, sid)
    assert answered[gated["call_id"]]["output"] == "erased 1"
    assert answered[plain["call_id"]]["output"] == "3"
    assert redis_client.get(f"test:runs:{key}") == "1"
    decided = json.loads(toolfan("approvals", "show", aid).stdout)
    assert (decided["state"], decided["by"]) == ("approved", "alice")
    inspected = json.loads(toolfan("inspect", sid).stdout)
    (call,) = [c for c in inspected["calls"] if c["call_id"] == gated["call_id"]]
    assert call["approval"]["by"] == "alice" and call["approval"]["digest"] == decided["digest"]
    check_exactly_once(api, Seeded(calls={sid: [gated, plain]}), redis_client)


def test_a_denied_call_never_runs_and_the_model_is_told_who_and_why(api, redis_client):
    key = uuid.uuid4().hex
    gated = function_call("transfer", {"key": key, "amount": 500}, turn_id="turn_1")
    small = function_call("transfer", {"key": key, "amount": 5}, turn_id="turn_1")
    sid = api.create_session([gated, small])["id"]
    with poll_loop():
        aid = waiting_for(sid, gated)
        assert json.loads(toolfan("approvals", "show", aid).stdout)["reason"] == (
            "a transfer of 500"
        )
        refused = toolfan("approvals", "deny", aid)
        assert refused.returncode == 2 and "needs --reason" in refused.stderr
        assert (
            toolfan("approvals", "deny", aid, "--by", "bob", "--reason", "too much").returncode == 0
        )
        answered = batch_events(api, sid)
    assert answered[gated["call_id"]] == {
        **answered[gated["call_id"]],
        "success": False,
        "error": "Denied by bob: too much",
    }
    assert answered[small["call_id"]]["output"] == "moved 5 (1)"
    assert redis_client.get(f"test:runs:{key}") == "1"  # the small transfer only


def test_operators_deciding_at_once_make_one_decision(api, redis_client):
    key = uuid.uuid4().hex
    gated = function_call("erase", {"key": key}, turn_id="turn_1")
    sid = api.create_session([gated])["id"]
    with poll_loop():
        aid = waiting_for(sid, gated)
        args = [sys.executable, "-m", "dispatcher.cli", "approvals"]
        procs = [
            subprocess.Popen(
                [*args, verb, aid, "--by", who, "--reason", "r"],
                cwd=ROOT,
                env=worker_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for verb, who in (("approve", "alice"), ("deny", "bob")) * 3
        ]
        codes = [p.wait(60) for p in procs]
        answered = batch_events(api, sid)
    assert sorted(codes) == [0, 2, 2, 2, 2, 2]
    winner = json.loads(toolfan("approvals", "show", aid).stdout)
    event = answered[gated["call_id"]]
    if winner["state"] == "approved":
        assert event["output"] == "erased 1" and redis_client.get(f"test:runs:{key}") == "1"
    else:
        assert event["error"] == "Denied by bob: r" and redis_client.get(f"test:runs:{key}") is None


@pytest.fixture
def short_timeout_worker() -> Iterator[Worker]:
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / "approvals-worker.log"
    args = ["-P", "threads", "-c", "2", "-n", "approvals@%h", "--without-mingle"]
    env = worker_env(TOOLFAN_APPROVAL_TIMEOUT="3")
    w = Worker([*args, "--without-gossip", "-Q", PRIVATE_QUEUE], log, env)
    w.wait_ready()
    try:
        yield w
    finally:
        w.stop()


@pytest.mark.usefixtures("short_timeout_worker")
def test_an_undecided_call_times_out_and_the_batch_goes_out(api, redis_client):
    key = uuid.uuid4().hex
    gated = function_call("private_erase", {"key": key}, turn_id="turn_1")
    sid = api.create_session([gated])["id"]
    with poll_loop():
        aid = waiting_for(sid, gated)
        answered = batch_events(api, sid)
    assert answered[gated["call_id"]]["error"] == "Approval timed out after 3 s"
    assert redis_client.get(f"test:runs:{key}") is None
    late = toolfan("approvals", "approve", aid)
    assert late.returncode == 2 and "timed out before this decision" in late.stderr


def test_an_operator_decides_over_http_with_the_intake_token(intake, api, redis_client):  # noqa: F811
    key = uuid.uuid4().hex
    gated = function_call("erase", {"key": key}, turn_id="turn_1")
    sid = api.create_session([gated])["id"]
    auth = {"authorization": f"Bearer {TOKEN}"}
    with poll_loop():
        aid = waiting_for(sid, gated)
        assert httpx.get(f"{intake}/approvals", timeout=10).status_code == 401
        listed = httpx.get(f"{intake}/approvals", headers=auth, timeout=10).json()["data"]
        (mine,) = [a for a in listed if a["id"] == aid]  # another test's may linger
        assert mine["function"] == "erase"
        one = httpx.get(f"{intake}/approvals/{aid}", headers=auth, timeout=10).json()
        assert one["state"] == "pending" and json.loads(one["arguments"]) == {"key": key}
        url = f"{intake}/approvals/{aid}"
        no_reason = httpx.post(f"{url}/deny", headers=auth, json={}, timeout=10)
        assert no_reason.status_code == 400
        approved = httpx.post(f"{url}/approve", headers=auth, json={"by": "carol"}, timeout=10)
        assert approved.json() == {"id": aid, "state": "approved", "by": "carol"}
        again = httpx.post(f"{url}/deny", headers=auth, json={"reason": "late"}, timeout=10)
        assert again.status_code == 409 and again.json()["error"] == "already approved (by carol)"
        unknown = httpx.post(f"{intake}/approvals/apr_nope/approve", headers=auth, timeout=10)
        assert unknown.status_code == 404
        answered = batch_events(api, sid)
    assert answered[gated["call_id"]]["output"] == "erased 1"
    assert redis_client.get(f"test:runs:{key}") == "1"


def test_an_application_s_inline_call_waits_for_the_person_too(redis_client):
    import toolfan as public

    key = uuid.uuid4().hex
    calls = [
        {"id": "call_gate", "type": "function", "function": {"name": "erase", "arguments": ""}},
        {"id": "call_add", "type": "function", "function": {"name": "add", "arguments": ""}},
    ]
    calls[0]["function"]["arguments"] = json.dumps({"key": key})
    calls[1]["function"]["arguments"] = json.dumps({"a": 4, "b": 5})
    answered: list[list[dict]] = []
    caller = threading.Thread(
        target=lambda: answered.append(public.run_tool_calls(calls, timeout=90)), daemon=True
    )
    caller.start()

    wait_for(lambda: asked("call_gate"), 60, "the inline call's approval request")
    (approval,) = asked("call_gate")
    assert approval["source"] == "inline" and redis_client.get(f"test:runs:{key}") is None
    assert caller.is_alive()  # the application waits for the person, not for a timeout
    assert toolfan("approvals", "approve", approval["id"], "--by", "frank").returncode == 0
    caller.join(60)
    (messages,) = answered
    assert [m["content"] for m in messages] == ["erased 1", "9"]
    assert redis_client.get(f"test:runs:{key}") == "1"


def test_an_inline_caller_that_stops_waiting_closes_its_approval(redis_client):
    import toolfan as public

    key = uuid.uuid4().hex
    call = {
        "id": "call_gone",
        "type": "function",
        "function": {"name": "erase", "arguments": json.dumps({"key": key})},
    }
    done: list[list[dict]] = []
    caller = threading.Thread(
        target=lambda: done.append(public.run_tool_calls([call], timeout=8)), daemon=True
    )
    caller.start()

    wait_for(lambda: asked("call_gone"), 30, "the inline call's approval request")
    (approval,) = asked("call_gone")
    caller.join(30)
    assert "did not finish within the 8 s" in done[0][0]["content"]
    closed = json.loads(toolfan("approvals", "show", approval["id"]).stdout)
    assert (closed["state"], closed["decision_reason"]) == (
        "timed_out",
        "the caller stopped waiting after 8 s",
    )
    late = toolfan("approvals", "approve", approval["id"])
    assert late.returncode == 2 and "timed out before this decision" in late.stderr
    time.sleep(3)  # the parked task's next look finds the call answered: it never runs
    assert redis_client.get(f"test:runs:{key}") is None
