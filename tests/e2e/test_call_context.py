"""``CallContext`` end to end: what a tool on a real worker is told about its call.

The session's prefork worker runs ``whoami`` (tests/tools.py), which records the context
it was given in Redis; the tests compare it with what the session, the run or the
application said. ``whoami_killed`` SIGKILLs its own pool process on its first delivery,
so the broker redelivers it: its idempotency key must not change.
"""

from __future__ import annotations

import json
import uuid

import pytest

import toolfan
from emulator import function_call
from handlers import idempotency_key
from tests.e2e.harness import Seeded, check_exactly_once, poll_loop
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")


def recorded(redis_client, key: str, runs: int = 1) -> list[dict]:
    """The contexts ``whoami`` recorded under ``key``, once it ran ``runs`` times."""
    wait_for(lambda: redis_client.llen(f"test:ctx:{key}") >= runs, 60, f"{runs} run(s)")
    return [json.loads(v) for v in redis_client.lrange(f"test:ctx:{key}", 0, -1)]


def test_a_session_s_tool_is_told_its_session_agent_metadata_and_key(api, redis_client):
    key = uuid.uuid4().hex
    action = function_call("whoami", {"key": key}, turn_id="turn_ctx")
    metadata = {"customer_id": "cus_9", "tier": "gold"}
    sid = api.create_session([action], agent_id="agent_ctx", metadata=metadata)["id"]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 60, "the session's batch")
    (seen,) = recorded(redis_client, key)
    assert seen == {
        "source": "agents",
        "batch_id": sid,
        "turn_id": "turn_ctx",
        "call_id": action["call_id"],
        "function": "whoami",
        "agent_id": "agent_ctx",
        "metadata": metadata,
        "attempt": 1,
        "deadline": None,
        "idempotency_key": idempotency_key("agents", sid, "turn_ctx", action["call_id"]),
        "ids": {"session_id": sid},
        "current_is_given": True,
    }
    assert api.batches(sid)[0].events[0]["output"] == f"agents:{action['call_id']}"


def test_the_idempotency_key_survives_a_sigkill_redelivery(api, redis_client):
    key = uuid.uuid4().hex
    action = function_call("whoami_killed", {"key": key}, turn_id="turn_1")
    sid = api.create_session([action])["id"]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 90, "the redelivered call's batch")
    first, second = recorded(redis_client, key, 2)
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["idempotency_key"] == second["idempotency_key"]
    assert first["idempotency_key"] == idempotency_key("agents", sid, "turn_1", action["call_id"])
    assert api.batches(sid)[0].events[0]["output"] == "attempt 2"
    check_exactly_once(api, Seeded(calls={sid: [action]}), redis_client)


@pytest.mark.usefixtures("api")
def test_an_application_s_inline_calls_are_told_the_metadata_it_gave(redis_client):
    key = uuid.uuid4().hex
    calls = [
        {
            "id": "call_ctx",
            "type": "function",
            "function": {"name": "whoami", "arguments": json.dumps({"key": key})},
        }
    ]
    messages = toolfan.run_tool_calls(
        calls, conversation_id="conv_ctx", metadata={"user_id": "u_42"}, timeout=60
    )
    assert messages[0]["content"] == "inline:call_ctx"
    (seen,) = recorded(redis_client, key)
    assert seen["source"] == "inline" and seen["metadata"] == {"user_id": "u_42"}
    assert (seen["turn_id"], seen["call_id"], seen["attempt"]) == ("chat", "call_ctx", 1)
    assert seen["idempotency_key"] == idempotency_key(
        "inline", seen["batch_id"], "chat", "call_ctx"
    )
    with pytest.raises(TypeError, match="metadata must map strings to strings"):
        toolfan.run_tool_calls(calls, metadata={"user_id": 42})  # type: ignore[dict-item]
