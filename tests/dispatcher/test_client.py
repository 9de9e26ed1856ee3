"""The httpx client against the emulator on a real port: paging, filters, faults, errors."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from dispatcher import client as client_module
from dispatcher.client import AgentsClient
from dispatcher.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    EndpointError,
    FinalAPIError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RetriesExhausted,
    RetryableAPIError,
    ServerError,
)
from dispatcher.models import FunctionCall, OpaqueAction, tool_result_event
from dispatcher.retry import RetryPolicy, parse_retry_after
from emulator import (
    EmulatorServer,
    computer_use_approval_request,
    environment_connection,
    function_call,
    mcp_approval_request,
    running_emulator,
)
from emulator.testing import TEST_API_KEY, wait_until
from handlers.errors import ToolfanError

FAST = RetryPolicy(max_attempts=4, initial_delay=0.001, max_delay=0.01, max_elapsed=5.0)


@pytest.fixture(scope="module")
def emulator_server() -> Iterator[EmulatorServer]:
    with running_emulator() as server:
        yield server


@pytest.fixture
def emu(emulator_server: EmulatorServer) -> EmulatorServer:
    emulator_server.state.reset()
    emulator_server.state.turn_duration = 0.05
    return emulator_server


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(emu: EmulatorServer, sleeps: list[float]) -> Iterator[AgentsClient]:
    with AgentsClient(
        TEST_API_KEY,
        emu.base_url,
        retry=FAST,
        timeout=httpx.Timeout(5.0),
        sleep=sleeps.append,  # record the waits instead of spending them
        rng=random.Random(1),
    ) as c:
        yield c


def _session(emu: EmulatorServer, *calls: tuple[str, str]) -> str:
    actions = [function_call("add", {"a": 1}, turn_id=t, call_id=c) for t, c in calls]
    return str(emu.state.create_session(actions)["id"])


def _result(turn_id: str = "t1", call_id: str = "c1") -> dict[str, object]:
    return tool_result_event(turn_id, call_id, success=True, output="2")


# --- configuration and headers ----------------------------------------------------------------


def test_sends_auth_beta_and_user_agent_headers(emu: EmulatorServer, client: AgentsClient) -> None:
    list(client.iter_sessions())

    (request,) = emu.state.requests()
    assert request.headers["openai-beta"] == "agents=v1"
    assert request.headers["user-agent"].startswith("toolfan/")
    assert request.headers["user-agent"] != "toolfan/0+unknown"
    assert request.headers["authorization"] == "Bearer <redacted>"


def test_reads_key_and_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with running_emulator(api_key="sk-from-env") as emu:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url)
        with AgentsClient() as c:
            assert list(c.iter_sessions()) == []
            assert c.base_url == emu.base_url


def test_defaults_to_the_public_api_and_requires_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert AgentsClient("sk-x").base_url == "https://api.openai.com/v1"
    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY"):
        AgentsClient()


def test_never_shows_the_key() -> None:
    c = AgentsClient("sk-secret-123", "http://127.0.0.1:9/v1")
    assert "sk-secret-123" not in repr(c)


# --- listing ----------------------------------------------------------------------------------


def test_iterates_250_sessions_in_three_requests(emu: EmulatorServer, client: AgentsClient) -> None:
    created = [emu.state.create_session()["id"] for _ in range(250)]

    listed = [s.id for s in client.iter_sessions()]

    assert listed == created  # oldest first, each exactly once
    requests = emu.state.requests("/agents/sessions", "GET")
    assert len(requests) == 3
    assert all("limit=100" in r.query for r in requests)


def test_filters_by_agent_and_metadata(emu: EmulatorServer, client: AgentsClient) -> None:
    wanted = emu.state.create_session(agent_id="a1", metadata={"team": "x", "env": "prod"})["id"]
    emu.state.create_session(agent_id="a2", metadata={"team": "x", "env": "prod"})
    emu.state.create_session(agent_id="a1", metadata={"team": "x", "env": "dev"})
    emu.state.create_session(agent_id="a1")

    found = list(client.iter_sessions(agent_id="a1", metadata={"team": "x", "env": "prod"}))

    assert [s.id for s in found] == [wanted]
    assert len(list(client.iter_sessions(agent_id="a1"))) == 3
    assert len(list(client.iter_sessions(metadata={"team": "x"}))) == 3


def test_rejects_an_out_of_range_page_size(client: AgentsClient) -> None:
    with pytest.raises(ValueError, match="between 1 and 100"):
        list(client.iter_sessions(limit=101))


# --- parsing ----------------------------------------------------------------------------------


def test_function_calls_are_typed_and_everything_else_is_opaque(
    emu: EmulatorServer, client: AgentsClient
) -> None:
    sid = emu.state.create_session(
        [
            function_call("get_customer", {"customer_id": "123"}, turn_id="t1", call_id="c1"),
            mcp_approval_request(),
            computer_use_approval_request(),
            environment_connection(),
            {"type": "teleport_request", "destination": "mars"},  # a type invented next year
            {"type": "function_call", "turn_id": "t9", "name": "broken"},  # no call_id
        ]
    )["id"]

    session = client.retrieve_session(sid)

    assert session.status == "requires_action"
    assert session.function_calls == [
        FunctionCall(
            turn_id="t1", call_id="c1", name="get_customer", arguments={"customer_id": "123"}
        )
    ]
    others = session.other_actions
    assert [a.type for a in others] == [
        "mcp_approval_request",
        "computer_use_approval_request",
        "environment_connection",
        "teleport_request",
        "function_call",
    ]
    assert all(isinstance(a, OpaqueAction) for a in others)
    assert others[3].raw["destination"] == "mars"
    assert others[4].problem is not None and "call_id" in others[4].problem
    assert [a.problem is None for a in others[:4]] == [True] * 4


def test_malformed_sessions_in_a_page_are_skipped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    page = {
        "object": "list",
        "data": [{"id": "s1", "status": "idle"}, {"status": 5}],
        "has_more": False,
    }
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=page))

    with (
        AgentsClient("k", "http://api.test/v1", transport=transport) as c,
        caplog.at_level(logging.WARNING),
    ):
        sessions = list(c.iter_sessions())

    assert [s.id for s in sessions] == ["s1"]
    assert c.malformed_sessions == 1
    assert "malformed session" in caplog.text


# --- submitting -------------------------------------------------------------------------------


def test_submit_is_accepted_once(emu: EmulatorServer, client: AgentsClient) -> None:
    sid = _session(emu, ("t1", "c1"), ("t1", "c2"))

    accepted = client.submit_events(sid, [_result("t1", "c1"), _result("t1", "c2")], "key-1")

    assert (accepted.status_code, accepted.attempts) == (202, 1)
    (batch,) = emu.state.batches(sid)
    assert batch.idempotency_key == "key-1"
    assert [e["call_id"] for e in batch.events] == ["c1", "c2"]
    assert client.retrieve_session(sid).function_calls == []


def test_retries_500_with_the_same_key(
    emu: EmulatorServer, client: AgentsClient, sleeps: list[float]
) -> None:
    sid = _session(emu, ("t1", "c1"))
    emu.state.set_faults(error_rate=1.0, budget=2, endpoints=frozenset({"events"}))

    accepted = client.submit_events(sid, [_result()], "key-500")

    assert accepted.attempts == 3
    posts = emu.state.requests(method="POST")
    assert [r.status for r in posts] == [500, 500, 202]
    assert {r.idempotency_key for r in posts} == {"key-500"}
    assert len(emu.state.batches()) == 1
    assert len(sleeps) == 2
    assert all(0 <= s <= FAST.max_delay for s in sleeps)


def test_retries_429_honouring_retry_after(
    emu: EmulatorServer, client: AgentsClient, sleeps: list[float]
) -> None:
    sid = _session(emu, ("t1", "c1"))
    emu.state.set_faults(throttle_rate=1.0, budget=1, retry_after=0.75)

    session = client.retrieve_session(sid)

    assert session.id == sid
    assert sleeps == [0.75]  # at least what the API asked, far above the tiny backoff


def test_gives_up_when_retry_after_exceeds_the_time_budget(
    emu: EmulatorServer, sleeps: list[float]
) -> None:
    emu.state.set_faults(throttle_rate=1.0, retry_after=30)
    policy = RetryPolicy(max_attempts=5, initial_delay=0.001, max_elapsed=2.0)

    c = AgentsClient(TEST_API_KEY, emu.base_url, retry=policy, sleep=sleeps.append)
    with c, pytest.raises(RetriesExhausted) as caught:
        list(c.iter_sessions())

    assert caught.value.attempts == 1
    assert isinstance(caught.value.last_error, RateLimitError)
    assert caught.value.status_code == 429
    assert sleeps == []


def test_lost_202_is_answered_by_the_idempotent_replay(
    emu: EmulatorServer, client: AgentsClient
) -> None:
    sid = _session(emu, ("t1", "c1"))
    emu.state.set_faults(lost_202_rate=1.0, budget=1)

    accepted = client.submit_events(sid, [_result()], "key-lost")

    assert accepted.attempts == 2
    assert [r.outcome for r in emu.state.requests(method="POST")] == ["lost", "replayed"]
    (batch,) = emu.state.batches()
    assert batch.lost


def test_persistent_5xx_exhausts_retries(emu: EmulatorServer, client: AgentsClient) -> None:
    emu.state.set_faults(error_rate=1.0)

    with pytest.raises(RetriesExhausted) as caught:
        client.retrieve_session("sess_x")

    assert caught.value.attempts == FAST.max_attempts
    assert isinstance(caught.value.last_error, ServerError)
    assert isinstance(caught.value.__cause__, ServerError)
    assert len(emu.state.requests()) == FAST.max_attempts


def test_connection_refused_is_retryable_and_bounded(sleeps: list[float]) -> None:
    with running_emulator() as emu:
        base_url = emu.base_url  # stopped on leaving the block: nothing listens any more

    c = AgentsClient(TEST_API_KEY, base_url, retry=FAST, sleep=sleeps.append)
    with c, pytest.raises(RetriesExhausted) as caught:
        c.retrieve_session("sess_x")

    assert isinstance(caught.value.last_error, APIConnectionError)
    assert caught.value.attempts == FAST.max_attempts
    assert len(sleeps) == FAST.max_attempts - 1


def test_latency_beyond_the_timeout_is_a_retried_timeout(emu: EmulatorServer) -> None:
    emu.state.set_faults(latency=0.4, endpoints=frozenset({"list"}))
    policy = RetryPolicy(max_attempts=2, initial_delay=0.001)

    c = AgentsClient(TEST_API_KEY, emu.base_url, retry=policy, timeout=httpx.Timeout(0.1))
    with c, pytest.raises(RetriesExhausted) as caught:
        list(c.iter_sessions())
    wait_until(lambda: len(emu.state.requests()) == 2)  # the server finishes after we gave up

    assert isinstance(caught.value.last_error, APITimeoutError)
    with AgentsClient(TEST_API_KEY, emu.base_url, retry=policy, timeout=httpx.Timeout(2.0)) as c:
        assert list(c.iter_sessions()) == []


def test_lag_keeps_calls_visible_and_a_second_batch_conflicts(
    emu: EmulatorServer, client: AgentsClient
) -> None:
    sid = _session(emu, ("t1", "c1"))
    emu.state.set_faults(apply_lag=0.3)

    client.submit_events(sid, [_result()], "key-a")
    during = client.retrieve_session(sid)
    with pytest.raises(ConflictError) as conflict:
        client.submit_events(sid, [_result()], "key-b")

    assert [c.call_id for c in during.function_calls] == ["c1"]  # 202 is not completion
    assert conflict.value.code == "action_not_pending"
    assert len(emu.state.requests(method="POST")) == 2  # a final error is not retried
    wait_until(lambda: client.retrieve_session(sid).function_calls == [])


# --- final errors ------------------------------------------------------------------------------


def test_final_errors_are_raised_at_once(
    emu: EmulatorServer, client: AgentsClient, sleeps: list[float]
) -> None:
    sid = _session(emu, ("t1", "c1"))
    both = {**_result(), "error": "and failed"}

    with pytest.raises(NotFoundError):
        client.retrieve_session("sess_missing")
    with pytest.raises(BadRequestError) as bad:
        client.submit_events(sid, [both], "key-bad")
    with pytest.raises(ConflictError):
        client.submit_events(sid, [_result("t1", "nope")], "key-409")

    assert bad.value.status_code == 400
    assert "events[0]" in bad.value.message
    assert len(emu.state.requests()) == 3
    assert sleeps == []


def test_refused_key_is_a_clear_authentication_error() -> None:
    with running_emulator(api_key="sk-right") as emu:
        c = AgentsClient("sk-wrong-secret", emu.base_url, retry=FAST)
        with c, pytest.raises(AuthenticationError) as caught:
            list(c.iter_sessions())

        message = str(caught.value)
        assert "refused" in message
        assert emu.base_url in message
        assert "sk-wrong-secret" not in message
        assert caught.value.status_code == 401
        assert len(emu.state.requests()) == 1


def test_retries_are_logged_without_the_key(
    emu: EmulatorServer, client: AgentsClient, caplog: pytest.LogCaptureFixture
) -> None:
    emu.state.set_faults(error_rate=1.0, budget=1)

    with caplog.at_level(logging.WARNING, logger="dispatcher.client"):
        list(client.iter_sessions())

    (record,) = [r for r in caplog.records if r.name == "dispatcher.client"]
    assert "retrying GET /agents/sessions" in record.getMessage()
    assert TEST_API_KEY not in caplog.text


# --- the error tree and the retry arithmetic ---------------------------------------------------


def test_error_tree() -> None:
    assert issubclass(APIError, ToolfanError)
    for retryable in (
        RateLimitError,
        ServerError,
        APIConnectionError,
        APITimeoutError,
        RetriesExhausted,
    ):
        assert issubclass(retryable, RetryableAPIError)
        assert not issubclass(retryable, FinalAPIError)
    for final in (BadRequestError, NotFoundError, ConflictError):
        assert issubclass(final, FinalAPIError)
        assert not issubclass(final, RetryableAPIError)
    # A refused key or an unusable URL says nothing about a batch: neither final nor retryable.
    for config in (AuthenticationError, PermissionDeniedError, EndpointError):
        assert issubclass(config, ConfigurationError)
        assert not issubclass(config, FinalAPIError | RetryableAPIError)


def test_backoff_is_full_jitter_and_capped() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=4.0)
    rng = random.Random(3)

    samples = {attempt: [policy.backoff(attempt, rng) for _ in range(200)] for attempt in (1, 2, 5)}

    assert all(0 <= s <= 1.0 for s in samples[1])
    assert all(0 <= s <= 2.0 for s in samples[2])
    assert all(0 <= s <= 4.0 for s in samples[5])
    assert max(samples[5]) > 3.0  # the cap, not 16 s, bounds attempt 5
    assert min(samples[5]) < 1.0  # full jitter reaches down to zero


def test_parse_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    in_ten = format_datetime(now + timedelta(seconds=10), usegmt=True)

    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "1"}) == 0.25
    assert parse_retry_after({"retry-after": in_ten}, now=now.timestamp()) == pytest.approx(10.0)
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "-4"}) == 0.0


def test_user_agent_names_the_installed_version() -> None:
    from importlib.metadata import version

    assert client_module.user_agent() == f"toolfan/{version('toolfan')}"
