"""The official openai SDK against the emulator over real HTTP: proof the wire is true."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.beta.agent_session import (
    AgentSession,
    RequiredActionSessionRequiredActionResourceComputerUseApprovalRequest,
    RequiredActionSessionRequiredActionResourceEnvironmentConnection,
    RequiredActionSessionRequiredActionResourceFunctionCall,
    RequiredActionSessionRequiredActionResourceMcpApprovalRequest,
)
from openai.types.beta.agent_session_idle_event import AgentSessionIdleEvent
from openai.types.beta.agent_session_in_progress_event import AgentSessionInProgressEvent
from openai.types.beta.agent_session_requires_action_event import (
    AgentSessionRequiresActionEvent,
)

from emulator import (
    EmulatorServer,
    computer_use_approval_request,
    environment_connection,
    function_call,
    mcp_approval_request,
)
from emulator.testing import wait_until


def _result(turn_id: str, call_id: str, output: str = "ok") -> dict[str, object]:
    return {
        "type": "agent.session.input.tool_result",
        "turn_id": turn_id,
        "call_id": call_id,
        "success": True,
        "output": output,
    }


def test_list_auto_paginates_newest_first(emu: EmulatorServer, sdk: OpenAI) -> None:
    created = [emu.state.create_session()["id"] for _ in range(45)]

    listed = [s.id for s in sdk.beta.agents.sessions.list(limit=10)]

    assert listed == created[::-1]
    list_requests = emu.state.requests("/agents/sessions", "GET")
    assert len(list_requests) == 5  # 10+10+10+10+5, the last page says has_more=false
    assert "after=" in list_requests[1].query


def test_list_filters_and_ascending_order(emu: EmulatorServer, sdk: OpenAI) -> None:
    a1 = emu.state.create_session(agent_id="agent_a", metadata={"team": "x", "env": "prod"})["id"]
    emu.state.create_session(agent_id="agent_b", metadata={"team": "x", "env": "prod"})
    a3 = emu.state.create_session(agent_id="agent_a", metadata={"team": "x", "env": "prod"})["id"]
    emu.state.create_session(agent_id="agent_a", metadata={"team": "y", "env": "prod"})

    sessions = list(
        sdk.beta.agents.sessions.list(
            agent_id="agent_a", metadata={"team": "x", "env": "prod"}, order="asc", limit=1
        )
    )

    assert [s.id for s in sessions] == [a1, a3]
    assert all(s.agent.id == "agent_a" and s.metadata["team"] == "x" for s in sessions)


def test_retrieve_parses_every_action_kind_into_sdk_models(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    session_id = emu.state.create_session(
        [
            function_call("get_customer", {"customer_id": "123"}, turn_id="t1", call_id="c1"),
            function_call("add", {"a": 1, "b": 2}, turn_id="t2", call_id="c2"),
            mcp_approval_request(request_id="r1"),
            computer_use_approval_request(request_id="r2"),
            environment_connection("env_1"),
        ]
    )["id"]

    session = sdk.beta.agents.sessions.retrieve(session_id)

    assert session.status == "requires_action"
    kinds = [type(a) for a in session.required_actions]
    assert kinds == [
        RequiredActionSessionRequiredActionResourceFunctionCall,
        RequiredActionSessionRequiredActionResourceFunctionCall,
        RequiredActionSessionRequiredActionResourceMcpApprovalRequest,
        RequiredActionSessionRequiredActionResourceComputerUseApprovalRequest,
        RequiredActionSessionRequiredActionResourceEnvironmentConnection,
    ]
    call = session.required_actions[0]
    assert isinstance(call, RequiredActionSessionRequiredActionResourceFunctionCall)
    assert (call.turn_id, call.call_id, call.name) == ("t1", "c1", "get_customer")
    assert call.arguments == {"customer_id": "123"}
    assert [t.name for t in session.agent.tools] == ["get_customer", "add"]


def test_answers_validate_strictly_against_sdk_models(emu: EmulatorServer) -> None:
    """The SDK parses leniently; strict validation proves no required field is missing."""
    emu.state.create_session([function_call("add", {"a": 1})], metadata={"k": "v"})
    emu.state.create_session(status="failed", error="boom")
    headers = {"Authorization": "Bearer t", "OpenAI-Beta": "agents=v1"}

    page = httpx.get(f"{emu.base_url}/agents/sessions", headers=headers).json()

    for raw in page["data"]:
        AgentSession.model_validate(raw)  # raises on any missing or mistyped field
    assert {s["status"] for s in page["data"]} == {"requires_action", "failed"}


def test_events_create_is_accepted_and_recorded(emu: EmulatorServer, sdk: OpenAI) -> None:
    session_id = emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]

    answer = sdk.beta.agents.sessions.events.create(
        session_id, events=[_result("t1", "c1", "3")], idempotency_key="key-1"
    )

    assert answer is None  # 202, no body
    (batch,) = emu.state.batches(session_id)
    assert batch.idempotency_key == "key-1"
    assert batch.headers["openai-beta"] == "agents=v1"
    assert batch.events == [_result("t1", "c1", "3")]
    after = sdk.beta.agents.sessions.retrieve(session_id)
    assert after.required_actions == []
    assert after.status == "in_progress"
    wait_until(lambda: sdk.beta.agents.sessions.retrieve(session_id).status == "idle")


def test_sdk_raises_its_own_errors_for_the_emulators_answers(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    session_id = emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]

    with pytest.raises(openai.NotFoundError) as missing:
        sdk.beta.agents.sessions.retrieve("sess_nope")
    with pytest.raises(openai.ConflictError) as conflict:
        sdk.beta.agents.sessions.events.create(session_id, events=[_result("t1", "other")])
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.beta.agents.sessions.events.create(
            session_id, events=[{**_result("t1", "c1"), "error": "both"}]
        )
    with pytest.raises(openai.BadRequestError):
        sdk.beta.agents.sessions.list(limit=101)

    assert missing.value.code == "not_found"
    assert conflict.value.code == "action_not_pending"
    assert bad.value.param == "events[0].error"
    bad_key = OpenAI(api_key="wrong", base_url=emu.base_url, max_retries=0)
    assert [s.id for s in bad_key.beta.agents.sessions.list()] == [session_id]  # any token


def test_sdk_stream_sees_requires_action_then_progress_then_idle(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    session_id = emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]
    stream = sdk.beta.agents.sessions.events.stream(session_id)
    events = iter(stream)

    first = next(events)
    assert isinstance(first, AgentSessionRequiresActionEvent)
    assert first.type == "agent.session.requires_action"
    assert first.session.id == session_id
    call = first.session.required_actions[0]
    assert isinstance(call, RequiredActionSessionRequiredActionResourceFunctionCall)
    assert call.call_id == "c1"
    assert first.obfuscation  # the SDK's default asks for padding

    submit = threading.Timer(
        0.1,
        sdk.beta.agents.sessions.events.create,
        args=(session_id,),
        kwargs={"events": [_result("t1", "c1")]},
    )
    submit.start()
    rest = list(events)  # the stream closes itself once the session is idle
    submit.join()

    assert [type(e) for e in rest] == [AgentSessionInProgressEvent, AgentSessionIdleEvent]
    assert all(e.session.required_actions == [] for e in rest)  # type: ignore[union-attr]
