"""Authorization end to end on the session's worker: denied calls never run, nor do calls
to functions the session's agent does not declare; the batch still goes out once."""

from __future__ import annotations

import uuid

import pytest

from emulator import function_call
from emulator.wire import function_tool
from tests.e2e.harness import Seeded, batch_events, check_exactly_once, poll_loop

pytestmark = [pytest.mark.usefixtures("worker"), pytest.mark.quick]


def test_a_tool_s_policy_denies_outside_an_admin_session_and_it_never_runs(api, redis_client):
    key = uuid.uuid4().hex
    denied = function_call("delete_record", {"key": key}, turn_id="turn_1")
    plain = api.create_session([denied])["id"]
    allowed = function_call("delete_record", {"key": key}, turn_id="turn_1")
    admin = api.create_session([allowed], metadata={"role": "admin"})["id"]
    with poll_loop():
        refused = batch_events(api, plain)[denied["call_id"]]
        ran = batch_events(api, admin)[allowed["call_id"]]
    assert refused["success"] is False
    assert refused["error"] == "Not authorized: delete_record needs an admin session"
    assert ran == {**ran, "success": True, "output": "deleted 1"}
    assert redis_client.get(f"test:runs:{key}") == "1"  # the admin's call only
    check_exactly_once(api, Seeded(calls={plain: [denied], admin: [allowed]}), redis_client)


def test_a_call_to_a_function_the_agent_does_not_declare_is_refused_unsent(api, redis_client):
    key = uuid.uuid4().hex
    injected = function_call("count", {"key": key}, turn_id="turn_1")
    own = function_call("add", {"a": 2, "b": 3}, turn_id="turn_1")
    sid = api.create_session([own, injected], agent_id="agent_math", tools=[function_tool("add")])[
        "id"
    ]
    with poll_loop():
        events = batch_events(api, sid)
    assert events[own["call_id"]]["output"] == "5"
    refusal = events[injected["call_id"]]
    assert refusal["success"] is False
    assert refusal["error"] == "Not authorized: agent agent_math does not declare function 'count'"
    assert redis_client.get(f"test:runs:{key}") is None  # never sent, never run
    check_exactly_once(api, Seeded(calls={sid: [own, injected]}), redis_client)
