"""The run-shaped API's rules: phases, one submit per phase, 400s, expiry, cancel, faults.

Timing rules run on the Python API under a controllable clock; wire rules over real HTTP
against the session's emulator, through all three flavours' paths.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from emulator import EmulatorServer, EmulatorState, Faults, running_emulator
from emulator.testing import wait_until
from emulator.wire import WireError

HEADERS = {"Authorization": "Bearer t", "OpenAI-Beta": "assistants=v2"}
CALL = {"name": "add", "arguments": {"a": 1}, "id": "call_1"}


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> EmulatorState:
    return EmulatorState(turn_duration=0.2, clock=clock)


def _submit(state: EmulatorState, body: Any, run_id: str = "run_1") -> dict[str, Any]:
    run, _ = state.submit_tool_outputs("thread_1", run_id, body, {}, "openai")
    return run


def _outputs(*ids: str) -> dict[str, Any]:
    return {"tool_outputs": [{"tool_call_id": i, "output": "ok"} for i in ids]}


def _refused(state: EmulatorState, body: Any) -> WireError:
    with pytest.raises(WireError) as refused:
        _submit(state, body)
    return refused.value


@pytest.fixture
def openai_http(emu: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{emu.url}/v1", headers=HEADERS, timeout=5.0) as client:
        yield client


@pytest.fixture
def azure_http(emu: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{emu.url}/openai",
        headers={"api-key": "k"},
        params={"api-version": "2024-07-01-preview"},
        timeout=5.0,
    ) as client:
        yield client


@pytest.fixture
def foundry_http(emu: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{emu.url}/api/projects/my-project",
        headers={"Authorization": "Bearer entra"},
        params={"api-version": "v1"},
        timeout=5.0,
    ) as client:
        yield client


@pytest.fixture
def clients(
    openai_http: httpx.Client, azure_http: httpx.Client, foundry_http: httpx.Client
) -> list[httpx.Client]:
    return [openai_http, azure_http, foundry_http]


# --- phases ---------------------------------------------------------------------------------


def test_phases_advance_after_each_submit_then_complete(state: EmulatorState, clock: Clock) -> None:
    created = state.create_run(
        [[CALL, {"name": "mul", "id": "call_2"}], [{"name": "send", "id": "call_3"}]],
        thread_id="thread_1",
        run_id="run_1",
    )
    assert created["status"] == "requires_action"
    assert created["started_at"] == created["created_at"]
    calls = created["required_action"]["submit_tool_outputs"]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1", "call_2"]

    answer = _submit(state, _outputs("call_2", "call_1"))  # any order
    assert (answer["status"], answer["required_action"]) == ("queued", None)
    clock.advance(0.15)
    assert state.run("thread_1", "run_1")["status"] == "in_progress"  # second half of the turn
    clock.advance(0.1)
    second = state.run("thread_1", "run_1")
    assert second["status"] == "requires_action"
    assert [c["id"] for c in second["required_action"]["submit_tool_outputs"]["tool_calls"]] == [
        "call_3"
    ]

    assert _submit(state, _outputs("call_3"))["status"] == "queued"
    clock.advance(0.2)
    done = state.run("thread_1", "run_1")

    assert done["status"] == "completed"
    assert done["completed_at"] is not None
    assert done["expires_at"] is None
    assert done["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert [s["phase"] for s in state.submits()] == [0, 1]


def test_a_submit_answers_queued_even_when_turns_take_no_time(
    state: EmulatorState, clock: Clock
) -> None:
    state.turn_duration = 0.0
    state.create_run(
        [[CALL], [{"name": "g", "id": "call_2"}]], thread_id="thread_1", run_id="run_1"
    )

    assert _submit(state, _outputs("call_1"))["status"] == "queued"
    assert state.run("thread_1", "run_1")["status"] == "requires_action"


def test_arguments_are_strings_on_the_wire(state: EmulatorState) -> None:
    run = state.create_run(
        [[{"name": "a", "arguments": {"x": [1, "é"]}}, {"name": "b", "arguments": "{not json"}]]
    )

    calls = run["required_action"]["submit_tool_outputs"]["tool_calls"]

    assert json.loads(calls[0]["function"]["arguments"]) == {"x": [1, "é"]}
    assert calls[1]["function"]["arguments"] == "{not json"  # the model's text, verbatim
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    assert run["id"].startswith("run_")
    assert run["thread_id"].startswith("thread_")


def test_created_statuses(state: EmulatorState, clock: Clock) -> None:
    queued = state.create_run([[CALL]], thread_id="thread_1", run_id="q", status="queued")
    busy = state.create_run([[CALL]], thread_id="thread_1", run_id="p", status="in_progress")
    empty = state.create_run([], thread_id="thread_1", run_id="e")
    failed = state.create_run([[CALL]], thread_id="thread_1", run_id="f", status="failed")
    completed = state.create_run([[CALL]], thread_id="thread_1", run_id="c", status="completed")

    assert (queued["status"], queued["started_at"]) == ("queued", None)
    assert busy["status"] == "in_progress"
    assert empty["status"] == "queued"
    assert failed["last_error"] == {"code": "server_error", "message": "The run failed (emulated)."}
    assert failed["failed_at"] is not None
    assert completed["completed_at"] is not None
    clock.advance(0.2)
    assert state.run("thread_1", "q")["status"] == "requires_action"
    assert state.run("thread_1", "q")["started_at"] is not None
    assert state.run("thread_1", "p")["status"] == "requires_action"
    assert state.run("thread_1", "e")["status"] == "completed"


def test_create_run_refuses_nonsense(state: EmulatorState) -> None:
    state.create_run([[CALL]], thread_id="thread_1", run_id="run_1")
    with pytest.raises(ValueError, match="exists already"):
        state.create_run([[CALL]], thread_id="thread_1", run_id="run_1")
    with pytest.raises(ValueError, match="twice"):
        state.create_run([[CALL], [CALL]])
    with pytest.raises(ValueError, match="at least one call"):
        state.create_run([[]])
    with pytest.raises(ValueError, match="status"):
        state.create_run([[CALL]], status="sleeping")
    with pytest.raises(ValueError, match="requires_action"):
        state.create_run([], status="requires_action")
    with pytest.raises(ValueError, match="unknown call keys"):
        state.create_run([[{"name": "f", "call_id": "x"}]])
    with pytest.raises(ValueError, match="metadata"):
        state.create_run([[CALL]], metadata={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="expires_in"):
        state.create_run([[CALL]], expires_in=-1)


# --- one submit per phase, all or nothing ---------------------------------------------------


@pytest.fixture
def waiting(state: EmulatorState) -> EmulatorState:
    state.create_run(
        [[CALL, {"name": "mul", "id": "call_2"}], [{"name": "g", "id": "call_3"}]],
        thread_id="thread_1",
        run_id="run_1",
    )
    return state


@pytest.mark.parametrize(
    ("body", "code", "param", "message"),
    [
        (
            _outputs("call_1"),
            "missing_tool_outputs",
            "tool_outputs",
            "Missing tool outputs for tool_call_id 'call_2': all outputs of a required action "
            "must be submitted in a single request.",
        ),
        (
            {"tool_outputs": []},
            "missing_tool_outputs",
            "tool_outputs",
            "Missing tool outputs for tool_call_id 'call_1', 'call_2': all outputs of a "
            "required action must be submitted in a single request.",
        ),
        (
            _outputs("call_1", "call_2", "call_9"),
            "unknown_tool_call_id",
            "tool_outputs[2].tool_call_id",
            "No tool call found with id 'call_9' in the required action of run 'run_1'.",
        ),
        (
            _outputs("call_1", "call_3", "call_2"),  # a later phase's call is not asked yet
            "unknown_tool_call_id",
            "tool_outputs[1].tool_call_id",
            "No tool call found with id 'call_3' in the required action of run 'run_1'.",
        ),
        (
            _outputs("call_1", "call_1", "call_2"),
            "duplicate_tool_call_id",
            "tool_outputs[1].tool_call_id",
            "Duplicate tool output for tool_call_id 'call_1' in 'tool_outputs[1].tool_call_id': "
            "each call is answered exactly once.",
        ),
        (
            {"tool_outputs": [{"tool_call_id": "call_1", "output": {"n": 3}}]},
            "invalid_type",
            "tool_outputs[0].output",
            "Invalid type for 'tool_outputs[0].output': expected a string, but got an object "
            "instead.",
        ),
        (
            {"tool_outputs": [{"tool_call_id": "call_1", "output": 3}]},
            "invalid_type",
            "tool_outputs[0].output",
            "Invalid type for 'tool_outputs[0].output': expected a string, but got an integer "
            "instead.",
        ),
        (
            {"tool_outputs": [{"tool_call_id": "call_1"}]},
            "missing_required_parameter",
            "tool_outputs[0].output",
            "Missing required parameter: 'tool_outputs[0].output'.",
        ),
        (
            {"tool_outputs": [{"output": "x"}]},
            "missing_required_parameter",
            "tool_outputs[0].tool_call_id",
            "Missing required parameter: 'tool_outputs[0].tool_call_id'.",
        ),
        (
            {"tool_outputs": [{"tool_call_id": "call_1", "output": "x", "success": True}]},
            "unknown_parameter",
            "tool_outputs[0].success",
            "Unknown parameter: 'tool_outputs[0].success'.",
        ),
        (
            {"tool_outputs": "call_1"},
            "invalid_type",
            "tool_outputs",
            "Invalid type for 'tool_outputs': expected an array, but got a string instead.",
        ),
        ({}, "missing_required_parameter", "tool_outputs", None),
        ({**_outputs("call_1", "call_2"), "events": []}, "unknown_parameter", "events", None),
        ({**_outputs("call_1", "call_2"), "stream": True}, "unsupported_value", "stream", None),
        ({**_outputs("call_1", "call_2"), "stream": "no"}, "invalid_type", "stream", None),
        ([], "invalid_type", "body", None),
    ],
)
def test_bad_submits_are_refused_whole(
    waiting: EmulatorState, body: Any, code: str, param: str, message: str | None
) -> None:
    error = _refused(waiting, body)

    assert (error.status, error.code, error.param) == (400, code, param)
    if message is not None:
        assert error.message == message
    assert waiting.submits() == []
    assert waiting.run("thread_1", "run_1")["status"] == "requires_action"


def test_stream_false_and_empty_outputs_are_fine(waiting: EmulatorState) -> None:
    body = {"tool_outputs": [{"tool_call_id": "call_1", "output": ""}], "stream": False}
    body["tool_outputs"].append({"tool_call_id": "call_2", "output": "x"})

    assert _submit(waiting, body)["status"] == "queued"


def test_only_a_run_in_requires_action_takes_outputs(waiting: EmulatorState, clock: Clock) -> None:
    _submit(waiting, _outputs("call_1", "call_2"))

    again = _refused(waiting, _outputs("call_1", "call_2"))
    clock.advance(0.15)
    busy = _refused(waiting, _outputs("call_3"))

    assert (again.status, again.code) == (400, "invalid_run_state")
    assert again.message == 'Runs in status "queued" do not accept tool outputs.'
    assert busy.message == 'Runs in status "in_progress" do not accept tool outputs.'
    assert len(waiting.submits()) == 1


def test_unknown_runs_are_404(state: EmulatorState) -> None:
    state.create_run([[CALL]], thread_id="thread_1", run_id="run_1")

    with pytest.raises(WireError) as run:
        state.run("thread_1", "run_2")
    with pytest.raises(WireError) as elsewhere:
        state.run("thread_2", "run_1")

    assert (run.value.status, run.value.code, run.value.param) == (404, "not_found", "run_id")
    assert run.value.message == "No run found with id 'run_2' in thread 'thread_1'."
    assert elsewhere.value.status == 404


# --- expiry and cancel ----------------------------------------------------------------------


def test_runs_expire_ten_minutes_after_creation(waiting: EmulatorState, clock: Clock) -> None:
    run = waiting.run("thread_1", "run_1")
    assert run["expires_at"] == run["created_at"] + 600

    clock.advance(600)
    expired = waiting.run("thread_1", "run_1")
    refused = _refused(waiting, _outputs("call_1", "call_2"))

    assert expired["status"] == "expired"
    assert expired["required_action"] is None
    assert expired["expires_at"] == run["created_at"] + 600
    assert refused.message == 'Runs in status "expired" do not accept tool outputs.'
    assert waiting.runs() == [{"thread_id": "thread_1", "run_id": "run_1", "status": "expired"}]


def test_expiry_during_a_turn_wins_over_the_next_phase(state: EmulatorState, clock: Clock) -> None:
    state.create_run([[CALL], [CALL | {"id": "call_2"}]], thread_id="thread_1", run_id="run_1")
    state.create_run([[CALL]], thread_id="thread_1", run_id="run_2", expires_in=0.1)
    state.create_run([[CALL]], thread_id="thread_1", run_id="run_3", expires_in=None)
    _submit(state, _outputs("call_1"), run_id="run_2")

    clock.advance(1000)

    assert state.run("thread_1", "run_2")["status"] == "expired"
    assert state.run("thread_1", "run_1")["status"] == "expired"
    never = state.run("thread_1", "run_3")
    assert (never["status"], never["expires_at"]) == ("requires_action", None)


def test_a_run_completed_before_its_expiry_stays_completed(
    state: EmulatorState, clock: Clock
) -> None:
    state.create_run([[CALL]], thread_id="thread_1", run_id="run_1", expires_in=1.0)
    _submit(state, _outputs("call_1"))

    clock.advance(5)

    assert state.run("thread_1", "run_1")["status"] == "completed"


def test_cancel_expire_fail_only_active_runs(waiting: EmulatorState) -> None:
    waiting.create_run([[CALL]], thread_id="thread_1", run_id="run_2")
    waiting.create_run([[CALL]], thread_id="thread_1", run_id="run_3")

    cancelled = waiting.cancel_run("thread_1", "run_1")
    expired = waiting.expire_run("thread_1", "run_2")
    failed = waiting.fail_run("thread_1", "run_3")

    assert (cancelled["status"], cancelled["cancelled_at"] is not None) == ("cancelled", True)
    assert (expired["status"], expired["expires_at"] is not None) == ("expired", True)
    assert failed["status"] == "failed"
    assert failed["last_error"]["code"] == "server_error"
    for verb, run_id, status in [
        (waiting.cancel_run, "run_1", "cancelled"),
        (waiting.cancel_run, "run_2", "expired"),
        (waiting.expire_run, "run_3", "failed"),
        (waiting.fail_run, "run_1", "cancelled"),
    ]:
        with pytest.raises(WireError) as refused:
            verb("thread_1", run_id)
        assert (refused.value.status, refused.value.code) == (400, "invalid_run_state")
        assert refused.value.message.endswith(f"run with status '{status}'.")
    assert _refused(waiting, _outputs("call_1", "call_2")).message == (
        'Runs in status "cancelled" do not accept tool outputs.'
    )


def test_a_queued_run_can_be_cancelled(waiting: EmulatorState) -> None:
    _submit(waiting, _outputs("call_1", "call_2"))

    assert waiting.cancel_run("thread_1", "run_1")["status"] == "cancelled"


# --- over HTTP: three flavours, one store ---------------------------------------------------


def _seed(emu: EmulatorServer, thread_id: str = "thread_1", run_id: str = "run_1") -> None:
    emu.state.create_run(
        [[CALL, {"name": "mul", "id": "call_2"}], [{"name": "g", "id": "call_3"}]],
        thread_id=thread_id,
        run_id=run_id,
    )


def test_every_flavour_serves_the_same_run(
    emu: EmulatorServer, clients: list[httpx.Client]
) -> None:
    _seed(emu)

    answers = [c.get("/threads/thread_1/runs/run_1") for c in clients]

    assert [a.status_code for a in answers] == [200, 200, 200]
    bodies = [a.json() for a in answers]
    assert bodies[0] == bodies[1] == bodies[2]
    assert all(a.headers["openai-poll-after-ms"] == "50" for a in answers)
    for client, flavour in zip(clients, ["openai", "azure-openai", "foundry"], strict=True):
        emu.state.reset()
        _seed(emu)
        posted = client.post(
            "/threads/thread_1/runs/run_1/submit_tool_outputs",
            json=_outputs("call_1", "call_2"),
        )
        assert posted.status_code == 200, posted.text
        assert posted.json()["status"] == "queued"
        (submit,) = emu.state.submits()
        assert (submit["flavour"], submit["phase"], submit["lost"]) == (flavour, 0, False)
        cancelled = client.post("/threads/thread_1/runs/run_1/cancel")
        assert cancelled.json()["status"] == "cancelled"
        again = client.post("/threads/thread_1/runs/run_1/cancel")
        assert again.status_code == 400
        assert again.json() == {
            "error": {
                "message": "Cannot cancel run with status 'cancelled'.",
                "type": "invalid_request_error",
                "code": "invalid_run_state",
                "param": None,
            }
        }


def test_rejected_submits_are_recorded_with_their_status(
    emu: EmulatorServer, openai_http: httpx.Client
) -> None:
    _seed(emu)

    partial = openai_http.post(
        "/threads/thread_1/runs/run_1/submit_tool_outputs", json=_outputs("call_1")
    )
    garbage = openai_http.post("/threads/thread_1/runs/run_1/submit_tool_outputs", content=b"{")
    whole = openai_http.post(
        "/threads/thread_1/runs/run_1/submit_tool_outputs", json=_outputs("call_1", "call_2")
    )

    assert (partial.status_code, garbage.status_code, whole.status_code) == (400, 400, 200)
    assert garbage.json()["error"]["code"] == "invalid_json"
    records = emu.state.requests("/submit_tool_outputs", "POST")
    assert [(r.status, r.outcome) for r in records] == [
        (400, "rejected"),
        (400, "rejected"),
        (200, "accepted"),
    ]
    assert len(emu.state.submits()) == 1


def test_list_runs_pages_and_query_errors(
    emu: EmulatorServer, openai_http: httpx.Client, foundry_http: httpx.Client
) -> None:
    ids = [emu.state.create_run([[CALL]], thread_id="thread_1")["id"] for _ in range(5)]

    first = openai_http.get("/threads/thread_1/runs", params={"limit": 2}).json()
    last = openai_http.get("/threads/thread_1/runs", params={"after": ids[1]}).json()
    foundry_last = foundry_http.get("/threads/thread_1/runs", params={"after": ids[1]}).json()
    foundry_first = foundry_http.get("/threads/thread_1/runs", params={"limit": 2}).json()

    assert [r["id"] for r in first["data"]] == [ids[4], ids[3]]
    assert (first["object"], first["first_id"], first["last_id"], first["has_more"]) == (
        "list",
        ids[4],
        ids[3],
        True,
    )
    assert [r["id"] for r in last["data"]] == [ids[0]]
    assert (last["last_id"], last["has_more"]) == (ids[0], False)  # OpenAI keeps the last id
    assert (foundry_last["last_id"], foundry_last["has_more"]) == (None, False)
    assert foundry_first["last_id"] == ids[3]
    for params in [{"limit": 0}, {"limit": 101}, {"limit": "x"}, {"order": "up"}, {"after": "r"}]:
        assert openai_http.get("/threads/thread_1/runs", params=params).status_code == 400
    unknown = openai_http.get("/threads/thread_nope/runs")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "No thread found with id 'thread_nope'."


def test_threads_are_listed_on_foundry_only(
    emu: EmulatorServer, foundry_http: httpx.Client, openai_http: httpx.Client
) -> None:
    for thread_id in ["thread_a", "thread_b", "thread_c"]:
        emu.state.create_run([[CALL]], thread_id=thread_id)
    emu.state.create_run([[CALL]], thread_id="thread_a")  # an old thread's new run

    page = foundry_http.get("/threads", params={"limit": 2}).json()
    rest = foundry_http.get("/threads", params={"limit": 2, "after": page["last_id"]}).json()

    assert [t["id"] for t in page["data"]] == ["thread_c", "thread_b"]
    assert page["data"][0] == {
        "id": "thread_c",
        "object": "thread",
        "created_at": page["data"][0]["created_at"],
        "metadata": {},
        "tool_resources": {},
    }
    assert ([t["id"] for t in rest["data"]], rest["last_id"]) == (["thread_a"], None)
    assert openai_http.get("/threads").status_code == 404


def test_auth_per_flavour(emu: EmulatorServer) -> None:
    _seed(emu)
    url = "/threads/thread_1/runs/run_1"
    version = {"api-version": "v1"}

    def status(prefix: str, headers: dict[str, str], params: dict[str, str] | None = None) -> int:
        return httpx.get(f"{emu.url}{prefix}{url}", headers=headers, params=params).status_code

    assert status("/v1", HEADERS) == 200
    assert status("/v1", {"Authorization": "Bearer t"}) == 400  # no assistants=v2
    assert status("/v1", {"Authorization": "Bearer t", "OpenAI-Beta": "agents=v1"}) == 400
    assert status("/v1", {"OpenAI-Beta": "assistants=v2"}) == 401
    assert status("/v1", {"api-key": "k", "OpenAI-Beta": "assistants=v2"}) == 401
    assert status("/openai", {"api-key": "k"}, version) == 200
    assert status("/openai", {"Authorization": "Bearer ad"}, version) == 200
    assert status("/openai", {"api-key": "k", "OpenAI-Beta": "assistants=v2"}, version) == 200
    assert status("/openai", {}, version) == 401
    assert status("/openai", {"api-key": "k"}) == 400
    assert status("/openai", {"api-key": "k"}, {"api-version": ""}) == 400
    assert status("/api/projects/p", {"Authorization": "Bearer e"}, version) == 200
    assert status("/api/projects/p", {"api-key": "k"}, version) == 401
    assert status("/api/projects/p", {"Authorization": "Bearer e"}) == 400
    missing = httpx.get(f"{emu.url}/openai{url}", headers={"api-key": "k"}).json()["error"]
    assert (missing["code"], missing["param"]) == ("MissingApiVersionParameter", "api-version")
    assert emu.state.requests("/runs/run_1")[1].outcome == "rejected"


def test_a_set_api_key_is_required_by_every_flavour() -> None:
    state = EmulatorState()
    state.create_run([[CALL]], thread_id="thread_1", run_id="run_1")
    with running_emulator(state, api_key="secret") as emu:
        path = "/threads/thread_1/runs/run_1"
        v = {"api-version": "v1"}
        good = [
            httpx.get(f"{emu.url}/v1{path}", headers={**HEADERS, "Authorization": "Bearer secret"}),
            httpx.get(f"{emu.url}/openai{path}", headers={"api-key": "secret"}, params=v),
            httpx.get(f"{emu.url}/api/projects/p{path}", headers=_bearer("secret"), params=v),
        ]
        bad = [
            httpx.get(f"{emu.url}/v1{path}", headers=HEADERS),
            httpx.get(f"{emu.url}/openai{path}", headers={"api-key": "wrong"}, params=v),
            httpx.get(f"{emu.url}/api/projects/p{path}", headers=_bearer("wrong"), params=v),
        ]
    assert [r.status_code for r in good] == [200, 200, 200]
    assert [r.status_code for r in bad] == [401, 401, 401]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_sessions_routes_keep_their_own_beta_header(
    emu: EmulatorServer, openai_http: httpx.Client
) -> None:
    assert openai_http.get("/agents/sessions").status_code == 400  # assistants=v2 is not agents=v1
    ok = openai_http.get("/agents/sessions", headers={"OpenAI-Beta": "agents=v1"})
    assert ok.status_code == 200


def test_timing_over_http(emu: EmulatorServer, openai_http: httpx.Client) -> None:
    emu.state.turn_duration = 0.1
    emu.state.create_run([[CALL]], thread_id="thread_1", run_id="run_1", expires_in=0.3)
    emu.state.create_run([[CALL]], thread_id="thread_1", run_id="run_2")
    url = "/threads/thread_1/runs/{}"

    openai_http.post(url.format("run_2") + "/submit_tool_outputs", json=_outputs("call_1"))
    wait_until(lambda: openai_http.get(url.format("run_2")).json()["status"] == "completed")
    wait_until(lambda: openai_http.get(url.format("run_1")).json()["status"] == "expired")
    late = openai_http.post(url.format("run_1") + "/submit_tool_outputs", json=_outputs("call_1"))

    assert late.status_code == 400
    assert late.json()["error"]["message"] == 'Runs in status "expired" do not accept tool outputs.'


# --- faults ---------------------------------------------------------------------------------


def test_default_fault_endpoints_include_the_run_endpoints() -> None:
    assert {"runs", "threads", "submit_outputs", "cancel"} <= Faults().endpoints
    assert {"list", "retrieve", "events", "stream"} <= Faults().endpoints


def test_errors_filtered_by_endpoint(
    emu: EmulatorServer, openai_http: httpx.Client, foundry_http: httpx.Client
) -> None:
    _seed(emu)
    run_url = "/threads/thread_1/runs/run_1"
    submit = f"{run_url}/submit_tool_outputs"

    emu.state.set_faults(error_rate=1.0, endpoints=frozenset({"submit_outputs"}))
    assert openai_http.get(run_url).status_code == 200
    assert openai_http.get("/threads/thread_1/runs").status_code == 200
    failed = openai_http.post(submit, json=_outputs("call_1", "call_2"))
    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "server_error"
    assert emu.state.submits() == []

    emu.state.set_faults(error_rate=1.0, endpoints=frozenset({"runs"}))
    assert openai_http.get(run_url).status_code == 500
    assert foundry_http.get("/threads/thread_1/runs").status_code == 500
    assert foundry_http.get("/threads").status_code == 200
    assert (
        openai_http.get("/agents/sessions", headers={"OpenAI-Beta": "agents=v1"}).status_code == 200
    )
    assert openai_http.post(submit, json=_outputs("call_1", "call_2")).status_code == 200

    emu.state.set_faults(error_rate=1.0, endpoints=frozenset({"threads"}))
    assert foundry_http.get("/threads").status_code == 500
    assert foundry_http.get(run_url).status_code == 200

    emu.state.set_faults(error_rate=1.0, endpoints=frozenset({"list", "retrieve", "events"}))
    assert openai_http.get(run_url).status_code == 200  # sessions' names leave runs alone
    assert openai_http.post(f"{run_url}/cancel").status_code == 200
    outcomes = [r.outcome for r in emu.state.requests(run_url)]
    assert "error" in outcomes


def test_throttle_and_budget_on_runs(emu: EmulatorServer, azure_http: httpx.Client) -> None:
    _seed(emu)
    emu.state.set_faults(throttle_rate=1.0, retry_after=0.5, budget=1)

    throttled = azure_http.get("/threads/thread_1/runs/run_1")
    then = azure_http.get("/threads/thread_1/runs/run_1")

    assert throttled.status_code == 429
    assert (throttled.headers["Retry-After"], throttled.headers["retry-after-ms"]) == ("1", "500")
    assert then.status_code == 200


def test_lost_answer_after_the_submit_was_applied(
    emu: EmulatorServer, openai_http: httpx.Client
) -> None:
    _seed(emu)
    emu.state.set_faults(lost_202_rate=1.0, budget=1, endpoints=frozenset({"submit_outputs"}))
    submit = "/threads/thread_1/runs/run_1/submit_tool_outputs"

    with pytest.raises(httpx.RemoteProtocolError):
        openai_http.post(submit, json=_outputs("call_1", "call_2"))
    (lost,) = emu.state.submits()
    retry = openai_http.post(submit, json=_outputs("call_1", "call_2"))

    assert lost["lost"] is True
    assert emu.state.run("thread_1", "run_1")["status"] in {"queued", "in_progress"}
    assert retry.status_code == 400  # applied already: the run is no longer waiting
    assert retry.json()["error"]["code"] == "invalid_run_state"
    assert [r.outcome for r in emu.state.requests(submit, "POST")] == ["lost", "rejected"]


def test_lost_answers_follow_the_endpoint_filter(
    emu: EmulatorServer, openai_http: httpx.Client
) -> None:
    _seed(emu)
    emu.state.set_faults(lost_202_rate=1.0, endpoints=frozenset({"events"}))

    answer = openai_http.post(
        "/threads/thread_1/runs/run_1/submit_tool_outputs", json=_outputs("call_1", "call_2")
    )

    assert answer.status_code == 200
    assert emu.state.submits()[0]["lost"] is False


def test_latency_and_answer_delay_apply_to_submits(
    emu: EmulatorServer, openai_http: httpx.Client
) -> None:
    _seed(emu)
    emu.state.set_faults(latency=0.2, answer_delay=0.2, endpoints=frozenset({"submit_outputs"}))

    start = time.monotonic()
    fast = openai_http.get("/threads/thread_1/runs/run_1")
    between = time.monotonic()
    slow = openai_http.post(
        "/threads/thread_1/runs/run_1/submit_tool_outputs", json=_outputs("call_1", "call_2")
    )

    assert (fast.status_code, slow.status_code) == (200, 200)
    assert between - start < 0.2
    assert time.monotonic() - between >= 0.4


def test_refuse_text_refuses_a_submit(emu: EmulatorServer, openai_http: httpx.Client) -> None:
    _seed(emu)
    emu.state.set_faults(refuse_text="secret")
    body = {
        "tool_outputs": [
            {"tool_call_id": "call_1", "output": "fine"},
            {"tool_call_id": "call_2", "output": "a secret"},
        ]
    }

    refused = openai_http.post("/threads/thread_1/runs/run_1/submit_tool_outputs", json=body)

    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "content_refused"
    assert refused.json()["error"]["param"] == "tool_outputs[1].output"
    assert emu.state.submits() == []


# --- admin ----------------------------------------------------------------------------------


def test_admin_routes(emu: EmulatorServer, admin: httpx.Client, foundry_http: httpx.Client) -> None:
    emu.state.turn_duration = 60.0  # the submitted run stays queued while the test reads it
    created = admin.post(
        "/runs",
        json={
            "thread_id": "thread_1",
            "run_id": "run_1",
            "assistant_id": "asst_demo",
            "metadata": {"tenant": "t1"},
            "phases": [[{"name": "add", "arguments": {"a": 1}, "id": "call_1"}]],
        },
    )
    assert created.status_code == 201
    assert created.json()["assistant_id"] == "asst_demo"
    for run_id in ["run_2", "run_3", "run_4"]:
        assert (
            admin.post(
                "/runs", json={"thread_id": "thread_1", "run_id": run_id, "phases": [[CALL]]}
            ).status_code
            == 201
        )
    done = admin.post(
        "/runs", json={"thread_id": "thread_2", "status": "completed", "expires_in": None}
    )
    assert done.json()["status"] == "completed"

    foundry_http.post("/threads/thread_1/runs/run_1/submit_tool_outputs", json=_outputs("call_1"))

    assert admin.post("/runs/thread_1/run_2/cancel").json()["status"] == "cancelled"
    assert admin.post("/runs/thread_1/run_3/expire").json()["status"] == "expired"
    assert admin.post("/runs/thread_1/run_4/fail").json()["status"] == "failed"
    assert admin.post("/runs/thread_1/run_4/fail").status_code == 400
    assert admin.get("/runs/thread_1/run_1").json()["status"] == "queued"
    assert admin.get("/runs/thread_1/run_9").status_code == 404
    listed = admin.get("/runs").json()["data"]
    assert [(r["thread_id"], r["run_id"], r["status"]) for r in listed] == [
        ("thread_1", "run_1", "queued"),
        ("thread_1", "run_2", "cancelled"),
        ("thread_1", "run_3", "expired"),
        ("thread_1", "run_4", "failed"),
        ("thread_2", done.json()["id"], "completed"),
    ]
    (submit,) = admin.get("/submits", params={"thread_id": "thread_1", "run_id": "run_1"}).json()[
        "data"
    ]
    assert submit["flavour"] == "foundry"
    assert submit["tool_outputs"] == _outputs("call_1")["tool_outputs"]
    assert submit["headers"]["authorization"] == "Bearer <redacted>"
    assert isinstance(submit["received_at"], float)
    assert admin.get("/submits", params={"run_id": "run_2"}).json()["data"] == []
    assert (
        admin.get("/requests", params={"path": "submit_tool_outputs"}).json()["data"][0]["outcome"]
        == "accepted"
    )

    assert admin.post("/reset").status_code == 200
    assert emu.state.runs() == []
    assert emu.state.submits() == []
    assert foundry_http.get("/threads").json()["data"] == []


def test_admin_refuses_bad_bodies(admin: httpx.Client) -> None:
    for body in [
        {"phases": [[{"name": "f"}]], "colour": "red"},
        {"phases": [[{"name": "f"}]], "status": "sleeping"},
        {"phases": [[]]},
        {"phases": "f"},
        {"phases": [[{"arguments": "{}"}]]},
    ]:
        answer = admin.post("/runs", json=body)
        assert answer.status_code == 400, body
        assert answer.json()["error"]["code"] == "invalid_admin_request"


def test_bulk_runs_and_submits_offset(
    emu: EmulatorServer, admin: httpx.Client, openai_http: httpx.Client
) -> None:
    before = time.time()
    body = {
        "runs": [
            {"phases": [[CALL]]},
            {"thread_id": "thread_b", "run_id": "run_b", "phases": [[{**CALL, "id": "call_2"}]]},
            {"thread_id": "thread_b", "status": "completed"},
        ]
    }
    created = admin.post("/runs/bulk", json=body)
    assert created.status_code == 201
    ids, at = created.json()["data"], created.json()["at"]
    assert before <= at <= time.time()
    assert len(ids) == 3 and ids[1] == {"thread_id": "thread_b", "run_id": "run_b"}
    statuses = [emu.state.run(i["thread_id"], i["run_id"])["status"] for i in ids]
    assert statuses == ["requires_action", "requires_action", "completed"]
    assert [r["run_id"] for r in emu.state.runs()] == [i["run_id"] for i in ids]
    for bad in ({"runs": "x"}, {"runs": [1]}, {"runs": [{"colour": "red"}]}):
        answer = admin.post("/runs/bulk", json=bad)
        assert answer.status_code == 400, bad
        assert answer.json()["error"]["code"] == "invalid_admin_request"

    for run, call in ((ids[0], "call_1"), (ids[1], "call_2")):
        path = f"/threads/{run['thread_id']}/runs/{run['run_id']}/submit_tool_outputs"
        assert openai_http.post(path, json=_outputs(call)).status_code == 200
    submits = admin.get("/submits").json()["data"]
    assert [s["run_id"] for s in submits] == [ids[0]["run_id"], "run_b"]
    assert at <= submits[0]["received_at"] <= submits[1]["received_at"] <= time.time()
    assert [s["run_id"] for s in admin.get("/submits?offset=1").json()["data"]] == ["run_b"]
    assert admin.get("/submits", params={"offset": 5}).json()["data"] == []
    assert admin.get("/submits", params={"offset": -1}).status_code == 400


# --- any-character ids ----------------------------------------------------------------------

HOSTILE_IDS = ["a/b", "/", "50%", "%2F", "{run_id}", "line\nbreak", "nul\x00byte", "🙂", "x" * 5000]


def _encoded(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@pytest.mark.parametrize("hostile", [*HOSTILE_IDS, "sur\ud800"], ids=lambda v: ascii(v[:20]))
def test_any_character_ids_over_every_path(
    emu: EmulatorServer, clients: list[httpx.Client], admin: httpx.Client, hostile: str
) -> None:
    emu.state.turn_duration = 60.0  # the submitted run stays queued while the test reads it
    emu.state.create_run([[{"name": "f", "id": hostile}]], thread_id=hostile, run_id=hostile)
    path = f"/threads/{_encoded(hostile)}/runs/{_encoded(hostile)}"

    for client in clients:
        got = client.get(path)
        assert got.status_code == 200, got.text
        assert (got.json()["id"], got.json()["thread_id"]) == (hostile, hostile)
    page = clients[2].get(f"/threads/{_encoded(hostile)}/runs").json()
    assert [r["id"] for r in page["data"]] == [hostile]
    body = json.dumps({"tool_outputs": [{"tool_call_id": hostile, "output": hostile}]})
    posted = clients[1].post(f"{path}/submit_tool_outputs", content=body)
    assert posted.status_code == 200, posted.text
    assert admin.get(f"/runs/{_encoded(hostile)}/{_encoded(hostile)}").json()["status"] == "queued"
    (submit,) = emu.state.submits(thread_id=hostile, run_id=hostile)
    assert submit["tool_outputs"][0]["tool_call_id"] == hostile
    assert clients[0].post(f"{path}/cancel").json()["status"] == "cancelled"
