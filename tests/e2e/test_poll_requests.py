"""What a poll asks of the API: one list request per 100 sessions, filters on the server."""

import pytest

from dispatcher.poll import Poller
from emulator import function_call
from tasks.memo import DispatchMemo
from tasks.runtime import get_ledger
from tasks.settings import Settings, get_settings
from tests.e2e.harness import client
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")


def test_one_list_request_per_hundred_sessions_and_no_retrieves(api):
    for _ in range(250):
        api.create_session([])
    summary = Poller(client(), get_ledger("agents"), get_settings()).poll_once()
    assert summary.sessions_seen == 250
    assert summary.sessions_pending == 0
    assert len(api.requests("/agents/sessions", method="GET")) == 3
    assert all(r.path.endswith("/agents/sessions") for r in api.requests(method="GET"))


def test_agent_and_metadata_filters_pick_the_sessions(api):
    call = function_call("add", {"a": 1, "b": 2})
    mine = api.create_session([call], agent_id="agent_a", metadata={"team": "billing"})["id"]
    api.create_session([function_call("add", {"a": 1, "b": 2})], agent_id="agent_b")
    api.create_session(
        [function_call("add", {"a": 1, "b": 2})], agent_id="agent_a", metadata={"team": "ops"}
    )
    settings = Settings.from_env(
        {"TOOLFAN_AGENT_ID": "agent_a", "TOOLFAN_SESSION_METADATA": "team=billing"}
    )
    summary = Poller(client(), get_ledger("agents"), settings).poll_once()
    assert summary.sessions_seen == 1
    assert summary.sessions_dispatched == 1
    query = api.requests("/agents/sessions", method="GET")[0].query
    assert "agent_id=agent_a" in query and "metadata%5Bteam%5D=billing" in query
    wait_for(lambda: api.batches(mine), 30, "the filtered session's batch")
    assert [b.session_id for b in api.batches()] == [mine]


def test_dispatching_leaves_no_result_subscriptions_behind(api, redis_client):
    """No toolfan process waits on a Celery result, so a dispatch never subscribes to one
    (and need not unsubscribe after): two commands per call saved."""
    for i in range(10):
        api.create_session(
            [function_call("add", {"a": i, "b": j}, turn_id="turn_1") for j in range(3)]
        )
    before = len(redis_client.pubsub_channels("celery-task-meta-*"))
    sent = command_calls(redis_client, "subscribe") + command_calls(redis_client, "unsubscribe")
    summary = Poller(client(), get_ledger("agents"), get_settings()).poll_once()
    assert summary.calls_dispatched == 30
    assert len(redis_client.pubsub_channels("celery-task-meta-*")) <= before
    after = command_calls(redis_client, "subscribe") + command_calls(redis_client, "unsubscribe")
    assert after == sent


def test_a_process_that_dispatched_can_still_wait_for_a_result(api):
    """Only the dispatch's sends skip the result subscriptions: a Celery result this
    process waits for afterwards still arrives."""
    import uuid

    from tests.calls import agents_call

    api.create_session([function_call("add", {"a": 1, "b": 2})])
    assert Poller(client(), get_ledger("agents"), get_settings()).poll_once().calls_dispatched
    sid = f"sess_{uuid.uuid4().hex[:10]}"
    result = agents_call(sid, "turn_1", "call_1", "add", {"a": 2, "b": 3}).apply_async()
    assert result.get(timeout=30)["output"] == "5"


def command_calls(client, name: str) -> int:
    """How many times the server ran ``name`` so far."""
    return int(client.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def test_a_poller_rereads_only_the_claims_of_its_own_dispatches(api, redis_client):
    """Under a backlog the same in-flight sessions are listed every pass: the poller that
    dispatched them checks one claim per session instead of every call's state, and reads
    a session in full again as soon as its claim is no longer the one it wrote."""
    sessions = [
        api.create_session([function_call("unserved", {}, turn_id="turn_1") for _ in range(3)])
        for _ in range(4)
    ]
    ledger = get_ledger("agents")
    poller = Poller(client(), ledger, get_settings(), memo=DispatchMemo())
    assert poller.poll_once().calls_dispatched == 12

    def call_reads(pass_: Poller) -> int:
        before = hmget_calls(redis_client)
        summary = pass_.poll_once()
        assert summary.calls_dispatched == 0 and summary.skipped_in_flight == 12
        return hmget_calls(redis_client) - before

    assert call_reads(poller) == 0  # its own claims, checked with one GET per session
    fresh = Poller(client(), ledger, get_settings(), memo=DispatchMemo())
    assert call_reads(fresh) == 12  # without the memo: every call's state

    gone = sessions[0]["id"]
    assert ledger.release(gone, ledger.claim_owner(gone) or "")
    again = poller.poll_once()
    assert again.sessions_dispatched == 1 and again.calls_dispatched == 3


def hmget_calls(client) -> int:
    """HMGETs the server ran so far: only the ledger's reads of call records use it."""
    return int(client.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))


def test_dispatched_tasks_leave_no_result_in_the_backend(api, redis_client):
    """The ledger keeps every result and the chord hands them to submit: the poller's
    execute and submit tasks store nothing in Celery's result backend."""
    sid = api.create_session([function_call("add", {"a": i, "b": 1}) for i in range(3)])["id"]
    summary = Poller(client(), get_ledger("agents"), get_settings()).poll_once()
    assert summary.calls_dispatched == 3
    wait_for(lambda: api.batches(sid), 30, "the batch")
    assert sorted(e["output"] for e in api.batches(sid)[0].events) == ["1", "2", "3"]
    wait_for(lambda: get_ledger("agents").claim_owner(sid) is None, 10, "submit to finish")
    assert redis_client.keys("celery-task-meta-*") == []


def test_a_poller_reads_its_own_in_flight_sessions_only_as_far_as_their_ids(api, monkeypatch):
    """Relisted sessions this poller dispatched are checked on their ids alone: no full
    read (validation, argument limits) until their claim says something changed."""
    import dispatcher.listing
    import dispatcher.poll

    reads: list[str] = []
    for module in (dispatcher.listing, dispatcher.poll):
        real = module.parse_session

        def counting(raw, real=real):
            reads.append(raw.get("id") if isinstance(raw, dict) else None)
            return real(raw)

        monkeypatch.setattr(module, "parse_session", counting)
    sessions = [
        api.create_session([function_call("unserved", {}, turn_id="turn_1") for _ in range(2)])
        for _ in range(3)
    ]
    ledger = get_ledger("agents")
    poller = Poller(client(), ledger, get_settings(), memo=DispatchMemo())
    assert poller.poll_once().calls_dispatched == 6
    assert len(reads) == 3
    reads.clear()
    again = poller.poll_once()
    assert (again.sessions_pending, again.skipped_in_flight, again.calls_dispatched) == (3, 6, 0)
    assert reads == []
    fresh = Poller(client(), ledger, get_settings(), memo=DispatchMemo())
    assert fresh.poll_once().skipped_in_flight == 6
    assert len(reads) == 3  # a poller that did not dispatch them reads them in full
    reads.clear()
    gone = sessions[0]["id"]
    assert ledger.release(gone, ledger.claim_owner(gone) or "")
    third = poller.poll_once()
    assert reads == [gone]  # its claim is gone: read in full, and dispatched again
    assert (third.sessions_dispatched, third.calls_dispatched, third.skipped_in_flight) == (1, 2, 4)
