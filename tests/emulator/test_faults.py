"""Each fault knob, observed over real HTTP."""

from __future__ import annotations

import time

import httpx
import pytest

from emulator import EmulatorServer, Faults, function_call
from emulator.testing import wait_until
from tests.emulator.conftest import RESULT


@pytest.fixture
def session_id(emu: EmulatorServer) -> str:
    return str(emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"])


def _submit(http: httpx.Client, session_id: str, key: str = "k1") -> httpx.Response:
    return http.post(
        f"/agents/sessions/{session_id}/events",
        json={"events": [RESULT]},
        headers={"Idempotency-Key": key},
    )


def test_error_rate_answers_500_on_scoped_endpoints_only(
    emu: EmulatorServer, http: httpx.Client, session_id: str
) -> None:
    emu.state.set_faults(error_rate=1.0, endpoints=frozenset({"events"}))

    assert http.get("/agents/sessions").status_code == 200
    assert http.get(f"/agents/sessions/{session_id}").status_code == 200
    failed = _submit(http, session_id)

    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "server_error"
    assert emu.state.batches() == []
    assert emu.state.session(session_id)["required_actions"] != []
    assert emu.state.requests(method="POST")[0].outcome == "error"


def test_throttle_answers_429_with_retry_after(
    emu: EmulatorServer, http: httpx.Client, session_id: str
) -> None:
    emu.state.set_faults(throttle_rate=1.0, retry_after=1.5)

    response = http.get(f"/agents/sessions/{session_id}")

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "2"  # whole seconds, rounded up
    assert response.headers["retry-after-ms"] == "1500"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


def test_budget_limits_the_number_of_faults(emu: EmulatorServer, http: httpx.Client) -> None:
    emu.state.set_faults(error_rate=1.0, budget=2)

    statuses = [http.get("/agents/sessions").status_code for _ in range(4)]

    assert statuses == [500, 500, 200, 200]


def test_same_seed_same_faults(emu: EmulatorServer, http: httpx.Client) -> None:
    def run() -> list[int]:
        emu.state.set_faults(error_rate=0.5, seed=7)
        return [http.get("/agents/sessions").status_code for _ in range(16)]

    first, second = run(), run()

    assert first == second
    assert set(first) == {200, 500}


def test_latency_delays_answers(emu: EmulatorServer, http: httpx.Client) -> None:
    emu.state.set_faults(latency=0.3, endpoints=frozenset({"list"}))

    start = time.monotonic()
    assert http.get("/agents/sessions").status_code == 200
    assert time.monotonic() - start >= 0.3
    with pytest.raises(httpx.ReadTimeout):
        http.get("/agents/sessions", timeout=0.05)


def test_apply_lag_keeps_actions_visible_after_202(
    emu: EmulatorServer, http: httpx.Client, session_id: str
) -> None:
    emu.state.set_faults(apply_lag=0.4)

    assert _submit(http, session_id).status_code == 202
    during = http.get(f"/agents/sessions/{session_id}").json()
    second = _submit(http, session_id, key="another-key")

    assert during["status"] == "requires_action"
    assert [a["call_id"] for a in during["required_actions"]] == ["c1"]
    assert second.status_code == 409  # already answered, even though still listed
    wait_until(lambda: http.get(f"/agents/sessions/{session_id}").json()["required_actions"] == [])


def test_lost_202_applies_then_drops_the_connection(
    emu: EmulatorServer, http: httpx.Client, session_id: str
) -> None:
    emu.state.set_faults(lost_202_rate=1.0, budget=1)

    with pytest.raises(httpx.RemoteProtocolError):
        _submit(http, session_id)
    (batch,) = emu.state.batches()
    assert batch.lost
    assert emu.state.session(session_id)["required_actions"] == []

    retry = _submit(http, session_id)

    assert retry.status_code == 202
    assert len(emu.state.batches()) == 1
    assert [r.outcome for r in emu.state.requests(method="POST")] == ["lost", "replayed"]


def test_faults_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        Faults(error_rate=2.0)
    with pytest.raises(ValueError, match="unknown endpoints"):
        Faults(endpoints=frozenset({"everything"}))
    with pytest.raises(ValueError, match="unknown fault knobs"):
        Faults.from_json({"eror_rate": 1})
