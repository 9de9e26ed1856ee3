"""The approval inbox on a real Redis: one request per call, one decision, a deadline."""

from __future__ import annotations

import threading
import time

import pytest

from handlers import CallContext, Outcome
from tasks.approvals import (
    ApprovalStore,
    AwaitingApproval,
    State,
    approval_id,
    digest_of,
    gate,
)


@pytest.fixture
def store(redis_client) -> ApprovalStore:
    return ApprovalStore(redis_client, ttl=3600)


def ctx(call_id: str = "call_1", deadline: float | None = None) -> CallContext:
    return CallContext(
        source="agents",
        batch_id="sess_1",
        turn_id="turn_1",
        call_id=call_id,
        function="erase",
        deadline=deadline,
    )


def test_the_first_request_wins_and_later_ones_read_it(store):
    first, new = store.ask(ctx(), {"key": "a"}, "erasing is final", 600, 15)
    again, renewed = store.ask(ctx(), {"key": "b"}, "another reason", 5, 15)
    assert new and not renewed and again == first
    assert first.id == approval_id("agents", "sess_1", "turn_1", "call_1")
    assert first.digest == digest_of({"key": "a"}) and first.state is State.PENDING
    assert 599 < first.seconds_left() <= 600
    assert [a.id for a in store.pending()] == [first.id]


def test_the_deadline_is_never_later_than_the_batch_s_own(store):
    soon = time.time() + 100
    approval, _ = store.ask(ctx(deadline=soon), {}, "r", 600, 15)
    assert approval.deadline == pytest.approx(soon - 15, abs=0.01)


def test_one_decision_counts_when_operators_approve_and_deny_at_once(store):
    approval, _ = store.ask(ctx(), {"key": "a"}, "r", 600, 15)
    results: list[tuple[State, bool]] = []
    start = threading.Barrier(20)

    def decide(decision: State, who: str) -> None:
        start.wait()
        results.append((decision, store.decide(approval.id, decision, who, "why").taken))

    threads = [
        threading.Thread(target=decide, args=(State.APPROVED if i % 2 else State.DENIED, f"op{i}"))
        for i in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taken = [d for d, ok in results if ok]
    assert len(taken) == 1
    decided = store.get(approval.id)
    assert decided is not None and decided.state is taken[0] and decided.by.startswith("op")
    assert store.pending() == []
    late = store.decide(approval.id, State.APPROVED, "late", "")
    assert (late.taken, late.outcome, late.by) == (False, decided.state.value, decided.by)


def test_past_its_deadline_a_request_takes_no_decision(store):
    approval, _ = store.ask(ctx(), {}, "r", 0.2, 0)
    time.sleep(0.3)
    refused = store.decide(approval.id, State.APPROVED, "alice", "")
    assert (refused.taken, refused.outcome) == (False, "timed_out")
    assert store.decide("apr_nope", State.APPROVED, "alice", "").outcome == "unknown"


def test_the_gate_waits_then_runs_only_the_approved_arguments(store):
    with pytest.raises(AwaitingApproval) as waiting:
        gate(store, ctx(), {"key": "a", "n": 1}, "r", 600, 15)
    assert waiting.value.seconds == 2.0
    store.decide(waiting.value.approval.id, State.APPROVED, "alice", "ok")
    assert gate(store, ctx(), {"n": 1, "key": "a"}, "r", 600, 15) is None  # any key order
    changed = gate(store, ctx(), {"key": "b", "n": 1}, "r", 600, 15)
    assert changed is not None and changed.outcome is Outcome.DENIED
    assert changed.error == "Not authorized: the arguments differ from the ones that were approved"


def test_the_gate_answers_a_denied_or_timed_out_call(store):
    with pytest.raises(AwaitingApproval) as waiting:
        gate(store, ctx("call_d"), {}, "r", 600, 15)
    store.decide(waiting.value.approval.id, State.DENIED, "bob", "not on a Friday")
    denied = gate(store, ctx("call_d"), {}, "r", 600, 15)
    assert denied is not None and denied.error == "Denied by bob: not on a Friday"
    with pytest.raises(AwaitingApproval):
        gate(store, ctx("call_t"), {}, "r", 0.3, 0)
    time.sleep(0.4)
    timed_out = gate(store, ctx("call_t"), {}, "r", 0.3, 0)
    assert timed_out is not None and timed_out.outcome is Outcome.TIMEOUT
    assert timed_out.error == "Approval timed out after 0 s"


def test_a_waiting_call_keeps_its_batch_claimed_and_its_dispatch_fresh(ledger):
    from tasks.ledger import Dispatch

    now = time.time()
    assert ledger.claim_dispatch("sess_wait", Dispatch("token", now - 100, 1_000))
    ledger.extend_claim("sess_wait", 600_000)
    assert ledger.client.pttl(ledger._claim_key("sess_wait")) > 590_000
    dispatch = ledger.dispatch("sess_wait")
    assert dispatch is not None and dispatch.lease_ms >= 699_000  # 100 s past, 600 s ahead
    ledger.extend_claim("sess_unclaimed", 600_000)  # keeps a claim; never makes one
    assert ledger.claim_owner("sess_unclaimed") is None


def test_a_batch_going_out_answers_its_waiting_call_as_an_approval_timeout(ledger, store):
    # A run's expiry and the approval's deadline are the same instant; the waiting task
    # looks again up to POLL_SECONDS later, so the poller's expiry often answers first.
    from tasks.dispatch import Dispatcher, PendingCall
    from tasks.ledger import CallRef, CallStatus
    from tasks.runtime import get_settings

    none = CallStatus(None, None)

    expires = time.time() + 20
    with pytest.raises(AwaitingApproval) as waiting:
        gate(store, ctx("call_w", deadline=expires), {"key": "k"}, "r", 600, 15)
    dispatcher = Dispatcher("agents", ledger, get_settings(), noun="session")
    status = dispatcher._expire("sess_1", PendingCall("turn_1", "call_w", "erase", {}), none)
    assert status.result is not None and status.result.outcome is Outcome.TIMEOUT
    assert status.result.error == "Approval timed out after 5 s"  # asked 5 s before its deadline
    closed = store.get(waiting.value.approval.id)
    assert closed is not None and closed.state is State.TIMED_OUT
    late = store.decide(closed.id, State.APPROVED, "alice", "")
    assert (late.taken, late.outcome) == (False, "timed_out")
    assert store.pending() == []
    # A call with no approval, or one already approved (it is running), is answered as a
    # call that did not finish.
    plain = dispatcher._expire("sess_1", PendingCall("turn_1", "call_p", "add", {}), none)
    with pytest.raises(AwaitingApproval) as approved:
        gate(store, ctx("call_a", deadline=expires), {}, "r", 600, 15)
    store.decide(approved.value.approval.id, State.APPROVED, "alice", "ok")
    running = dispatcher._expire("sess_1", PendingCall("turn_1", "call_a", "erase", {}), none)
    for answered in (plain, running):
        assert answered.result is not None and answered.result.error is not None
        assert answered.result.error.startswith("Function ")
        assert "did not finish before the session's pending actions expire" in answered.result.error
    assert ledger.saved(CallRef("sess_1", "turn_1", "call_w")) == status.result


def test_closing_an_approval_already_timed_out_answers_it_without_counting_it_again(store):
    from prometheus_client import REGISTRY

    from tasks.approvals import close

    def timed_out() -> float:
        value = REGISTRY.get_sample_value("toolfan_approvals_total", {"decision": "timed_out"})
        return value or 0.0

    with pytest.raises(AwaitingApproval):
        gate(store, ctx("call_c"), {}, "r", 0.2, 0)
    time.sleep(0.3)
    before = timed_out()
    by_gate = gate(store, ctx("call_c"), {}, "r", 0.2, 0)  # the waiting task times it out
    assert timed_out() == before + 1
    ref = ("sess_1", "turn_1", "call_c")
    closed = close(store, "agents", ref, "the session's pending actions expire")
    assert closed == by_gate and timed_out() == before + 1
    assert close(store, "agents", ("sess_1", "turn_1", "call_none"), "why") is None
