"""The delivery fault knobs, each shown to do what it says (and nothing when unset)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import standardwebhooks
from openai import OpenAI

from emulator import EmulatorServer, function_call
from emulator.webhooks import WebhookFaults
from emulator.webhooks.testing import Push, WebhookReceiver, running_receiver
from tests.emulator.conftest import RESULT

pytestmark = pytest.mark.slow  # over 5 s: make test-fast leaves it out

VERIFIER = OpenAI(api_key="unused")


@pytest.fixture
def receiver(emu: EmulatorServer) -> Iterator[WebhookReceiver]:
    with running_receiver() as rx:
        yield rx
        emu.state.webhooks.clear()


@pytest.fixture
def secret(emu: EmulatorServer, receiver: WebhookReceiver) -> str:
    return str(emu.state.webhooks.register(receiver.url)["signing_secret"])


def _verify_both(push: Push, secret: str) -> None:
    standardwebhooks.Webhook(secret).verify(push.body, push.headers)
    VERIFIER.webhooks.verify_signature(push.body, push.headers, secret=secret)


def _sessions(emu: EmulatorServer, count: int) -> list[str]:
    return [emu.state.create_session([function_call("add")])["id"] for _ in range(count)]


def _arrived(receiver: WebhookReceiver) -> list[str]:
    return [p.json()["data"]["id"] for p in receiver.pushes()]


def test_duplicate_delivers_each_event_twice_with_one_webhook_id(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(duplicate=1.0)
    ids = _sessions(emu, 3)

    pushes = receiver.wait_for(6)
    assert emu.state.webhooks.wait_idle(5)

    assert len(receiver.pushes()) == 6
    by_id: dict[str, list[Push]] = {}
    for push in pushes:
        by_id.setdefault(push.headers["webhook-id"], []).append(push)
    assert len(by_id) == 3 and all(len(copies) == 2 for copies in by_id.values())
    for first, second in by_id.values():
        assert first.body == second.body
        _verify_both(first, secret)
        _verify_both(second, secret)
    assert sorted(Counter(_arrived(receiver)).values()) == [2, 2, 2]
    assert sorted(set(_arrived(receiver))) == sorted(ids)
    records = emu.state.webhooks.deliveries()
    assert sum(r.duplicate for r in records) == 3
    assert all(e.duplicated for e in emu.state.webhooks.events())


def test_reorder_shuffles_events_within_the_window(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(concurrency=1)
    in_order = _sessions(emu, 8)
    receiver.wait_for(8)
    assert _arrived(receiver) == in_order  # one worker, no reorder: creation order

    emu.state.webhooks.set_faults(concurrency=1, reorder=400, seed=3)
    shuffled = _sessions(emu, 8)
    receiver.wait_for(16)

    arrived = _arrived(receiver)[8:]
    assert sorted(arrived) == sorted(shuffled)
    assert arrived != shuffled


def test_delay_holds_every_first_attempt(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    start = time.time()
    _sessions(emu, 1)
    assert receiver.wait_for(1)[0].at - start < 0.3  # no delay by default

    emu.state.webhooks.set_faults(delay=400)
    start = time.time()
    _sessions(emu, 2)
    pushes = receiver.wait_for(3)[1:]

    assert all(p.at - start >= 0.39 for p in pushes)


def test_fail_first_loses_the_first_attempts_then_delivers(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(fail_first=2, retry_base=0.05)
    start = time.time()
    (session_id,) = _sessions(emu, 1)

    (push,) = receiver.wait_for(1)
    assert emu.state.webhooks.wait_idle(5)

    assert push.at - start >= 0.14  # two backoffs: 0.05 + 0.1
    _verify_both(push, secret)
    records = emu.state.webhooks.deliveries(session=session_id)
    assert [(r.attempt, r.outcome, r.sent_at is None) for r in records] == [
        (1, "lost", True),
        (2, "lost", True),
        (3, "delivered", False),
    ]
    assert {r.webhook_id for r in records} == {push.headers["webhook-id"]}
    assert len(receiver.pushes()) == 1


def test_fail_first_beyond_max_attempts_never_delivers(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(fail_first=5, max_attempts=3, retry_base=0.01)
    (session_id,) = _sessions(emu, 1)

    assert emu.state.webhooks.wait_idle(5)

    assert receiver.pushes() == []
    records = emu.state.webhooks.deliveries(session=session_id)
    assert [r.outcome for r in records] == ["lost"] * 3 and records[-1].final


def test_drop_loses_events_the_session_stays_pollable(
    emu: EmulatorServer, sdk: OpenAI, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(drop=1.0)
    (session_id,) = _sessions(emu, 1)

    assert emu.state.webhooks.wait_idle(5)
    time.sleep(0.2)

    assert receiver.pushes() == []
    (record,) = emu.state.webhooks.deliveries(session=session_id)
    assert (record.outcome, record.attempt, record.sent_at) == ("dropped", 0, None)
    assert emu.state.webhooks.events(session=session_id)[0].dropped
    # The safety-net poll still finds the session waiting.
    listed = {s.id: s.status for s in sdk.beta.agents.sessions.list()}
    assert listed[session_id] == "requires_action"


def test_drop_is_seeded_and_reproducible(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    def dropped_pattern() -> list[bool]:
        emu.state.webhooks.set_faults(drop=0.5, seed=11)
        ids = _sessions(emu, 20)
        return [emu.state.webhooks.events(session=i)[0].dropped for i in ids]

    first, second = dropped_pattern(), dropped_pattern()

    assert first == second
    assert 0 < sum(first) < 20
    assert emu.state.webhooks.wait_idle(5)
    assert len(receiver.pushes()) == 40 - 2 * sum(first)


def test_stale_sends_an_extra_event_for_an_answered_session(
    emu: EmulatorServer, http: httpx.Client, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(stale=1.0)
    session_id = emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]
    (first,) = receiver.wait_for(1)

    answer = http.post(f"/agents/sessions/{session_id}/events", json={"events": [RESULT]})
    assert answer.status_code == 202
    stale = receiver.wait_for(2)[1]

    _verify_both(stale, secret)
    assert stale.json()["data"] == {"id": session_id, "required_action": {"type": "function_call"}}
    assert stale.headers["webhook-id"] != first.headers["webhook-id"]
    assert emu.state.session(session_id)["required_actions"] == []  # no longer waiting
    assert [e.source for e in emu.state.webhooks.events(session=session_id)] == ["session", "stale"]


def test_no_stale_event_without_the_knob(
    emu: EmulatorServer, http: httpx.Client, receiver: WebhookReceiver, secret: str
) -> None:
    session_id = emu.state.create_session([function_call("add", turn_id="t1", call_id="c1")])["id"]
    receiver.wait_for(1)

    http.post(f"/agents/sessions/{session_id}/events", json={"events": [RESULT]})
    assert emu.state.webhooks.wait_idle(5)
    time.sleep(0.2)

    assert len(receiver.pushes()) == 1


def test_knobs_validate_and_reset_with_the_emulator(emu: EmulatorServer) -> None:
    for bad in (
        {"duplicate": 2},
        {"drop": -0.1},
        {"delay": -1},
        {"fail_first": 1.5},
        {"max_attempts": 0},
        {"concurrency": 0},
        {"timeout": 0},
        {"stale": True},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            WebhookFaults(**bad)
    with pytest.raises(ValueError, match="unknown"):
        WebhookFaults.from_json({"lose": 1})

    emu.state.webhooks.set_faults(drop=0.5, seed=4)
    emu.state.reset()

    assert emu.state.webhooks.faults == WebhookFaults()
