"""Scripting the emulator: the admin HTTP routes, the Python state API, streams, lifecycle."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from emulator import EmulatorServer, EmulatorState, function_call, running_emulator
from emulator.testing import wait_until
from tests.emulator.conftest import RESULT


def test_admin_seeds_sessions_and_reads_back_batches(
    emu: EmulatorServer, admin: httpx.Client, http: httpx.Client
) -> None:
    created = admin.post(
        "/sessions",
        json={
            "session_id": "sess_demo",
            "agent_id": "agent_demo",
            "metadata": {"tenant": "t1"},
            "function_calls": [
                {"name": "add", "arguments": {"a": 1}, "turn_id": "t1", "call_id": "c1"}
            ],
            "required_actions": [{"type": "environment_connection", "environment_id": "env_1"}],
        },
    )
    assert created.status_code == 201
    assert created.json()["status"] == "requires_action"
    added = admin.post(
        "/sessions/sess_demo/actions",
        json={"function_calls": [{"name": "mul", "turn_id": "t2", "call_id": "c9"}]},
    )
    assert [a.get("call_id") for a in added.json()["required_actions"]] == [None, "c1", "c9"]

    posted = http.post(
        "/agents/sessions/sess_demo/events",
        json={"events": [RESULT]},
        headers={"Idempotency-Key": "k"},
    )
    assert posted.status_code == 202

    (batch,) = admin.get("/batches", params={"session_id": "sess_demo"}).json()["data"]
    assert batch["idempotency_key"] == "k"
    assert batch["headers"]["authorization"] == "Bearer <redacted>"
    assert batch["events"] == [RESULT]
    requests = admin.get("/requests", params={"method": "POST"}).json()["data"]
    assert [(r["status"], r["outcome"]) for r in requests] == [(202, "accepted")]
    assert admin.get("/sessions").json()["data"] == ["sess_demo"]


def test_admin_faults_settings_and_reset(
    emu: EmulatorServer, admin: httpx.Client, http: httpx.Client
) -> None:
    put = admin.put("/faults", json={"error_rate": 1, "endpoints": ["list"], "budget": 1})
    assert put.json()["endpoints"] == ["list"]
    assert http.get("/agents/sessions").status_code == 500
    assert admin.put("/faults", json={"eror_rate": 1}).status_code == 400
    assert admin.put("/settings", json={"turn_duration": 0.05}).json()["turn_duration"] == 0.05
    admin.post("/sessions", json={})

    assert admin.post("/reset").status_code == 200

    assert emu.state.session_ids() == []
    assert emu.state.requests() == []
    assert admin.get("/faults").json()["error_rate"] == 0.0


def test_admin_errors_are_json(admin: httpx.Client) -> None:
    assert admin.get("/sessions/nope").status_code == 404
    bad = admin.post("/sessions", json={"status": "sleeping"})
    assert bad.status_code == 400
    assert "sleeping" in bad.json()["error"]["message"]
    assert admin.post("/sessions", content=b"[]").status_code == 400


def test_state_statuses_follow_actions_and_turns() -> None:
    clock = [100.0]
    state = EmulatorState(turn_duration=5.0, clock=lambda: clock[0])
    idle = state.create_session()
    running = state.create_session(status="in_progress")
    sid = state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]

    assert (idle["status"], running["status"]) == ("idle", "in_progress")
    state.add_actions(idle["id"], [function_call("add")])
    assert state.session(idle["id"])["status"] == "requires_action"
    assert state.submit(sid, {"events": [RESULT]}, None, {}) == (False, False)
    assert state.session(sid)["status"] == "in_progress"
    clock[0] += 5.0
    assert state.session(sid)["status"] == "idle"


def test_apply_lag_under_a_controlled_clock() -> None:
    clock = [0.0]
    state = EmulatorState(turn_duration=0.0, clock=lambda: clock[0])
    state.set_faults(apply_lag=10.0)
    sid = state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]

    state.submit(sid, {"events": [RESULT]}, "k", {})
    clock[0] = 9.9
    assert state.session(sid)["status"] == "requires_action"
    clock[0] = 10.0
    assert state.session(sid)["status"] == "idle"


def test_raw_stream_frames(emu: EmulatorServer, http: httpx.Client) -> None:
    sid = emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]
    frames: list[tuple[str, dict[str, object]]] = []

    with http.stream(
        "GET",
        f"/agents/sessions/{sid}/events",
        headers={"Accept": "text/event-stream"},
        params={"include_obfuscation": "false"},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("event: "):
                data = json.loads(next(lines).removeprefix("data: "))
                frames.append((line.removeprefix("event: "), data))
                if len(frames) == 1:
                    emu.state.submit(sid, {"events": [RESULT]}, None, {})

    assert [name for name, _ in frames] == [
        "agent.session.requires_action",
        "agent.session.in_progress",
        "agent.session.idle",
    ]
    assert all(data["type"] == name and "obfuscation" not in data for name, data in frames)
    assert frames[0][1]["session"]["required_actions"][0]["call_id"] == "c1"  # type: ignore[index]


def test_stream_of_unknown_session_is_404(http: httpx.Client) -> None:
    response = http.get(
        "/agents/sessions/sess_nope/events", headers={"Accept": "text/event-stream"}
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_stream_lifetime_is_bounded(emu: EmulatorServer, http: httpx.Client) -> None:
    emu.state.stream_lifetime = 0.2
    sid = emu.state.create_session([function_call("add")])["id"]

    text = http.get(f"/agents/sessions/{sid}/events", timeout=3.0).text  # returns: stream closed

    assert text.count("event: agent.session.requires_action") == 1


def test_server_starts_on_a_free_port_and_stops_cleanly() -> None:
    with running_emulator() as emu:
        port = emu.port
        assert httpx.get(f"{emu.url}/_emulator/faults").status_code == 200
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", port), timeout=1),
    ):
        pass


def test_turn_ends_in_idle_over_http(emu: EmulatorServer, http: httpx.Client) -> None:
    emu.state.turn_duration = 0.1
    sid = emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]

    http.post(f"/agents/sessions/{sid}/events", json={"events": [RESULT]})

    wait_until(lambda: http.get(f"/agents/sessions/{sid}").json()["status"] == "idle")


def test_bulk_seeding_and_batches_offset(emu: EmulatorServer, admin: httpx.Client) -> None:
    calls = [{"name": "add", "arguments": {"a": 1}, "turn_id": "t1", "call_id": "c1"}]
    body = {"sessions": [{"function_calls": calls}, {"metadata": {"k": "v"}}, {}]}
    created = admin.post("/sessions/bulk", json=body)
    assert created.status_code == 201
    ids = created.json()["data"]
    assert len(ids) == 3
    assert isinstance(created.json()["at"], float)
    assert emu.state.session(ids[0])["status"] == "requires_action"
    assert emu.state.session(ids[1])["metadata"] == {"k": "v"}
    assert admin.post("/sessions/bulk", json={"sessions": "x"}).status_code == 400
    for i in range(3):
        emu.state.add_actions(ids[2], [function_call("add", {"a": i}, call_id=f"c{i}")])
    for sid in (ids[0], ids[2]):
        pending = emu.state.session(sid)["required_actions"]
        events = [{**RESULT, "turn_id": a["turn_id"], "call_id": a["call_id"]} for a in pending]
        emu.state.submit(sid, {"events": events}, None, {})
    assert [b["session_id"] for b in admin.get("/batches").json()["data"]] == [ids[0], ids[2]]
    assert [b["session_id"] for b in admin.get("/batches?offset=1").json()["data"]] == [ids[2]]
    assert admin.get("/batches?offset=5").json()["data"] == []
    assert admin.get("/batches?offset=-1").status_code == 400


def _listed(state: EmulatorState) -> dict[str, dict[str, object]]:
    from emulator.jsontext import dumps
    from emulator.validation import ListQuery

    page = json.loads(dumps(state.list_page(ListQuery(limit=100))))
    return {s["id"]: s for s in page["data"]}


def test_a_listed_session_follows_every_change_and_is_rendered_once_between() -> None:
    clock = [100.0]
    state = EmulatorState(turn_duration=5.0, clock=lambda: clock[0])
    sid = state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]
    first = _listed(state)[sid]
    assert first["status"] == "requires_action" and len(first["required_actions"]) == 1
    session = state._sessions[sid]
    assert session.text(clock[0]) is session.text(clock[0])  # unchanged: not rendered again

    state.add_actions(sid, [function_call("mul", turn_id="t1", call_id="c2")])
    assert [a["call_id"] for a in _listed(state)[sid]["required_actions"]] == ["c1", "c2"]
    both = [RESULT, {**RESULT, "call_id": "c2"}]
    state.submit(sid, {"events": both}, None, {})
    answered = _listed(state)[sid]
    assert (answered["status"], answered["required_actions"]) == ("in_progress", [])
    clock[0] += 5.0  # the turn ends by time alone, with no change to the session
    assert _listed(state)[sid]["status"] == "idle"
    assert _listed(state)[sid] == state.session(sid)
