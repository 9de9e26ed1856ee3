"""What a poll asks of the API: one list request per 100 sessions, filters on the server."""

import pytest

from dispatcher.poll import Poller
from emulator import function_call
from tasks.execute import get_ledger
from tasks.settings import Settings, get_settings
from tests.e2e.harness import client
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")


def test_one_list_request_per_hundred_sessions_and_no_retrieves(api):
    for _ in range(250):
        api.create_session([])
    summary = Poller(client(), get_ledger(), get_settings()).poll_once()
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
    summary = Poller(client(), get_ledger(), settings).poll_once()
    assert summary.sessions_seen == 1
    assert summary.sessions_dispatched == 1
    query = api.requests("/agents/sessions", method="GET")[0].query
    assert "agent_id=agent_a" in query and "metadata%5Bteam%5D=billing" in query
    wait_for(lambda: api.batches(mine), 30, "the filtered session's batch")
    assert [b.session_id for b in api.batches()] == [mine]


def test_dispatching_leaves_no_result_subscriptions_behind(api, redis_client):
    for i in range(10):
        api.create_session(
            [function_call("add", {"a": i, "b": j}, turn_id="turn_1") for j in range(3)]
        )
    before = len(redis_client.pubsub_channels("celery-task-meta-*"))
    summary = Poller(client(), get_ledger(), get_settings()).poll_once()
    assert summary.calls_dispatched == 30
    assert len(redis_client.pubsub_channels("celery-task-meta-*")) <= before
