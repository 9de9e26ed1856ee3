"""Submit outcomes and recovery paths, against the emulator, Redis and a real worker."""

import uuid

import pytest

from dispatcher.models import Session
from dispatcher.poll import PollSummary
from dispatcher.sources.agents import SOURCE
from dispatcher.sources.agents_batch import batch_key, build_body
from emulator import function_call
from tasks.execute import execute_call
from tasks.ledger import ABANDONED, SUBMITTED, CallRef
from tasks.runtime import get_ledger
from tasks.settings import load_registry
from tasks.submit import Submitted, submit_results
from tests.e2e.harness import poller
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")


def counted_session(api, n: int = 2):
    keys = [uuid.uuid4().hex for _ in range(n)]
    actions = [function_call("count", {"key": k}, turn_id="turn_1") for k in keys]
    return api.create_session(actions)["id"], actions, keys


def refs(sid, actions):
    return [CallRef(sid, a["turn_id"], a["call_id"]) for a in actions]


def payloads(sid, actions, output="x"):
    return [
        {
            "batch_id": sid,
            "turn_id": a["turn_id"],
            "call_id": a["call_id"],
            "name": a["name"],
            "success": True,
            "outcome": "ok",
            "output": output,
        }
        for a in actions
    ]


def test_batch_key_depends_on_session_and_body_not_on_call_order():
    results = payloads("s", [function_call("add", {}, turn_id="t", call_id=c) for c in "ab"])
    order, body = build_body(results, 1 << 20)
    assert order == [("t", "a"), ("t", "b")]
    assert build_body(results[::-1], 1 << 20) == (order, body)
    a = batch_key("s", body)
    assert a == batch_key("s", build_body(results[::-1], 1 << 20)[1])
    assert a != batch_key("s2", body)
    assert a != batch_key("s", build_body(results[:1], 1 << 20)[1])
    assert a != batch_key("s", build_body(payloads("s", results, output="y"), 1 << 20)[1])
    assert a.startswith("toolfan-")


def test_final_refusal_abandons_calls_with_reason_and_poll_leaves_them(api, redis_client):
    sid, actions, _ = counted_session(api)
    ledger = get_ledger("agents")
    ledger.claim(sid, "tok", 60_000)
    stranger = [*actions[:1], {**actions[1], "call_id": "call_never_requested"}]
    calls = [[a["turn_id"], a["call_id"]] for a in stranger]
    outcome = submit_results(sid, "tok", calls, payloads(sid, stranger), ledger, SOURCE, 60_000)
    assert outcome is Submitted.ABANDONED
    record = ledger.record(refs(sid, stranger)[0])
    assert record.state == ABANDONED
    assert "409" in record.abandon_reason and "no pending function call" in record.abandon_reason
    assert ledger.claim_owner(sid) is None
    assert api.batches() == []
    summary = poller().poll_once()  # actions[0] stays listed but is abandoned: left alone
    assert summary.skipped_submitted == 1
    assert summary.calls_dispatched == 1


def test_results_not_matching_the_claim_are_not_sent(api):
    sid, actions, _ = counted_session(api)
    ledger = get_ledger("agents")
    ledger.claim(sid, "tok", 60_000)
    calls = [[a["turn_id"], a["call_id"]] for a in actions]
    outcome = submit_results(sid, "tok", calls, payloads(sid, actions[:1]), ledger, SOURCE, 60_000)
    assert outcome is Submitted.MISMATCH
    assert ledger.claim_owner(sid) is None
    assert api.requests(f"/sessions/{sid}/events") == []


def test_a_claim_taken_over_is_not_submitted_by_the_old_owner(api):
    sid, actions, _ = counted_session(api)
    ledger = get_ledger("agents")
    ledger.claim(sid, "new-owner", 60_000)
    calls = [[a["turn_id"], a["call_id"]] for a in actions]
    outcome = submit_results(
        sid, "old-owner", calls, payloads(sid, actions), ledger, SOURCE, 60_000
    )
    assert outcome is Submitted.CLAIM_LOST
    assert ledger.claim_owner(sid) == "new-owner"
    assert api.requests(f"/sessions/{sid}/events") == []


def test_accepted_batch_marks_calls_submitted(api):
    sid, actions, _ = counted_session(api)
    ledger = get_ledger("agents")
    ledger.claim(sid, "tok", 60_000)
    calls = [[a["turn_id"], a["call_id"]] for a in actions]
    assert submit_results(sid, "tok", calls, payloads(sid, actions), ledger, SOURCE, 60_000) is (
        Submitted.ACCEPTED
    )
    record = ledger.record(refs(sid, actions)[0])
    assert record.state == SUBMITTED
    assert record.submission_key == batch_key(sid, build_body(payloads(sid, actions), 1 << 24)[1])
    assert api.batches(sid)[0].idempotency_key == record.submission_key


def test_saved_results_are_submitted_without_running_anything(api, redis_client):
    sid, actions, keys = counted_session(api)
    for ref_, action in zip(refs(sid, actions), actions, strict=True):
        execute_call(ref_, "count", action["arguments"], get_ledger("agents"), load_registry())
    summary = poller().poll_once()
    assert (summary.calls_dispatched, summary.calls_resubmitted) == (0, 2)
    wait_for(lambda: api.batches(sid), 30, "the batch")
    assert [e["output"] for e in api.batches(sid)[0].events] == ["1", "1"]
    assert [redis_client.get(f"test:runs:{k}") for k in keys] == ["1", "1"]


def test_stale_claim_expires_and_only_unsaved_calls_run_again(api, redis_client):
    sid, actions, keys = counted_session(api)
    ledger = get_ledger("agents")
    ledger.claim(sid, "crashed-dispatch", 300)  # its chord never completed
    first = refs(sid, actions)[0]
    execute_call(first, "count", actions[0]["arguments"], ledger, load_registry())
    assert poller().poll_once().skipped_in_flight == 2
    wait_for(lambda: ledger.claim_owner(sid) is None, 5, "the lease to run out")
    summary = poller().poll_once()
    assert (summary.calls_dispatched, summary.calls_resubmitted) == (1, 1)
    wait_for(lambda: api.batches(sid), 30, "the batch")
    assert [redis_client.get(f"test:runs:{k}") for k in keys] == ["1", "1"]
    assert len(api.batches(sid)[0].events) == 2


def test_malformed_call_is_an_error_and_the_rest_proceeds(api):
    good = function_call("add", {"a": 1, "b": 2}, turn_id="turn_1")
    sid = api.create_session([good, {"type": "function_call", "turn_id": "turn_1"}])["id"]
    summary = poller().poll_once()
    assert summary.errors == 1
    assert summary.calls_dispatched == 1
    wait_for(lambda: api.batches(sid), 30, "the batch")
    assert api.batches(sid)[0].events[0]["output"] == "3"


def test_repeated_call_entries_are_counted_once_as_errors():
    entry = {"type": "function_call", "turn_id": "t", "call_id": "c", "name": "add"}
    session = Session.model_validate(
        {"id": "s", "status": "requires_action", "required_actions": [entry, entry]}
    )
    summary = PollSummary()
    assert [c.call_id for c in poller()._unique_calls(session, summary)] == ["c"]
    assert summary.errors == 1


def test_a_submit_message_of_the_previous_version_still_delivers(api):
    """A submit queued before an upgrade names session_id, token, calls one by one."""
    from tasks.submit import submit

    sid, actions, _ = counted_session(api)
    ledger = get_ledger("agents")
    ledger.claim(sid, "tok", 60_000)
    calls = [[a["turn_id"], a["call_id"]] for a in actions]
    legacy = {"session_id": sid, "token": "tok", "calls": calls, "lease_ms": 60_000}
    sent = submit.apply_async(args=(payloads(sid, actions),), kwargs=legacy, queue="toolfan.submit")
    assert sent.get(timeout=30) == "accepted"
    assert [e["call_id"] for e in api.batches(sid)[0].events] == sorted(
        a["call_id"] for a in actions
    )
    assert {ledger.record(r).state for r in refs(sid, actions)} == {SUBMITTED}
