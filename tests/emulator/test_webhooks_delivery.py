"""Pushes of ``agent.session.action_required``: when, what, signed how, retried how.

Every push lands on a real HTTP receiver and is verified with both verifiers an
application would use: the ``standardwebhooks`` package and the official SDK.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
import standardwebhooks
from openai import OpenAI
from openai.types.webhooks import AgentSessionActionRequiredWebhookEvent

from emulator import (
    EmulatorServer,
    computer_use_approval_request,
    environment_connection,
    function_call,
    mcp_approval_request,
)
from emulator.testing import wait_until
from emulator.webhooks import WebhookState, sender
from emulator.webhooks.testing import Push, WebhookReceiver, running_receiver

pytestmark = pytest.mark.slow  # over 5 s: make test-fast leaves it out

VERIFIER = OpenAI(api_key="unused")


@pytest.fixture
def receiver(emu: EmulatorServer) -> Iterator[WebhookReceiver]:
    with running_receiver() as rx:
        yield rx
        emu.state.webhooks.clear()


@pytest.fixture
def secret(emu: EmulatorServer, receiver: WebhookReceiver) -> str:
    """An endpoint for the receiver, subscribed to action_required; its signing secret."""
    return str(emu.state.webhooks.register(receiver.url)["signing_secret"])


def _verify_both(push: Push, secret: str) -> None:
    standardwebhooks.Webhook(secret).verify(push.body, push.headers)
    VERIFIER.webhooks.verify_signature(push.body, push.headers, secret=secret)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_session_created_waiting_pushes_one_signed_event(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    before = int(time.time())
    session_id = emu.state.create_session([function_call("add", {"a": 1})])["id"]

    (push,) = receiver.wait_for(1)

    _verify_both(push, secret)
    body = push.json()
    assert set(body) == {"id", "object", "type", "created_at", "data"}
    assert body["id"].startswith("evt_") and body["object"] == "event"
    assert body["type"] == "agent.session.action_required"
    assert before <= body["created_at"] <= time.time()
    assert body["data"] == {"id": session_id, "required_action": {"type": "function_call"}}
    event = VERIFIER.webhooks.unwrap(push.body, push.headers, secret=secret)
    assert isinstance(event, AgentSessionActionRequiredWebhookEvent)
    headers = push.headers
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("OpenAI/")
    assert headers["webhook-id"].startswith("wh_")
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5
    assert headers["webhook-signature"] == WebhookState.sign(
        secret, headers["webhook-id"], headers["webhook-timestamp"], push.body
    )
    assert emu.state.webhooks.wait_idle(5)  # the answer is recorded after the push lands
    (record,) = emu.state.webhooks.deliveries(session=session_id)
    assert (record.outcome, record.status, record.attempt, record.final) == (
        "delivered",
        200,
        1,
        True,
    )
    assert record.webhook_id == headers["webhook-id"] and record.event_id == body["id"]


def test_a_forged_signature_or_tampered_body_fails_both_verifiers(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.create_session([function_call("add")])
    (push,) = receiver.wait_for(1)

    tampered = Push(push.path, push.headers, push.body.replace(b"sess_", b"sesx_"), push.at, 200)
    other = str(emu.state.webhooks.register(receiver.url + "2")["signing_secret"])
    for bad, key in ((tampered, secret), (push, other)):
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            standardwebhooks.Webhook(key).verify(bad.body, bad.headers)
        with pytest.raises(openai.InvalidWebhookSignatureError):
            VERIFIER.webhooks.verify_signature(bad.body, bad.headers, secret=key)


def test_each_event_has_its_own_webhook_id(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    ids = [emu.state.create_session([function_call("add")])["id"] for _ in range(5)]

    pushes = receiver.wait_for(5)

    assert sorted(p.json()["data"]["id"] for p in pushes) == sorted(ids)
    assert len({p.headers["webhook-id"] for p in pushes}) == 5
    assert len({p.json()["id"] for p in pushes}) == 5


@pytest.mark.parametrize(
    ("actions", "kind"),
    [
        ([mcp_approval_request()], "mcp_approval_request"),
        ([computer_use_approval_request()], "computer_use_approval_request"),
        ([environment_connection()], "environment_connection"),
        ([mcp_approval_request(), function_call("add")], "function_call"),
    ],
)
def test_the_event_names_the_kind_of_action_waited_on(
    emu: EmulatorServer,
    receiver: WebhookReceiver,
    secret: str,
    actions: list[dict[str, object]],
    kind: str,
) -> None:
    emu.state.create_session(actions)

    (push,) = receiver.wait_for(1)

    assert push.json()["data"]["required_action"] == {"type": kind}
    event = VERIFIER.webhooks.unwrap(push.body, push.headers, secret=secret)
    assert isinstance(event, AgentSessionActionRequiredWebhookEvent)


def test_raw_actions_count_as_function_calls(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.create_session(
        [mcp_approval_request()],
        raw_actions=[{"json": '{"type": "function_call"}', "turn_id": "t", "call_id": "c"}],
    )

    (push,) = receiver.wait_for(1)

    assert push.json()["data"]["required_action"] == {"type": "function_call"}


def test_sessions_not_waiting_push_nothing(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.create_session()
    emu.state.create_session(status="in_progress")
    emu.state.create_session([function_call("add")], status="failed")
    emu.state.create_session([function_call("add")], session_id="the_one")

    (push,) = receiver.wait_for(1)
    assert emu.state.webhooks.wait_idle(5)
    time.sleep(0.1)

    assert push.json()["data"]["id"] == "the_one"
    assert len(receiver.pushes()) == 1


def test_add_actions_pushes_again_only_for_new_actions(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    call = function_call("add", turn_id="t1", call_id="c1")
    session_id = emu.state.create_session()["id"]
    emu.state.add_actions(session_id, [call])
    receiver.wait_for(1)

    emu.state.add_actions(session_id, [call])  # already present: no new action
    emu.state.add_actions(session_id, [mcp_approval_request()])  # a new one, while waiting
    pushes = receiver.wait_for(2)
    assert emu.state.webhooks.wait_idle(5)
    time.sleep(0.1)

    assert len(receiver.pushes()) == 2
    assert [p.json()["data"] for p in pushes] == [
        {"id": session_id, "required_action": {"type": "function_call"}}
    ] * 2
    assert pushes[0].headers["webhook-id"] != pushes[1].headers["webhook-id"]


def test_admin_created_and_bulk_sessions_push_too(
    emu: EmulatorServer, admin: httpx.Client, receiver: WebhookReceiver, secret: str
) -> None:
    one = admin.post("/sessions", json={"function_calls": [{"name": "add"}]}).json()["id"]
    bulk = admin.post(
        "/sessions/bulk", json={"sessions": [{"function_calls": [{"name": "a"}]}, {}] * 3}
    ).json()["data"]
    admin.post(f"/sessions/{bulk[1]}/actions", json={"function_calls": [{"name": "b"}]})

    pushes = receiver.wait_for(5)

    assert sorted(p.json()["data"]["id"] for p in pushes) == sorted(
        [one, bulk[0], bulk[2], bulk[4], bulk[1]]
    )


def test_hostile_session_ids_arrive_as_ascii_json_that_both_verifiers_accept(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    hostile = 'a/b%c "d"\n\ud800\U0001f600'
    emu.state.create_session([function_call("add")], session_id=hostile)

    (push,) = receiver.wait_for(1)

    assert push.body.isascii()
    _verify_both(push, secret)
    assert push.json()["data"]["id"] == hostile


def test_500s_are_retried_with_backoff_and_the_same_webhook_id(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(retry_base=0.1)
    receiver.fail_next(500, 503)
    session_id = emu.state.create_session([function_call("add")])["id"]

    pushes = receiver.wait_for(3)
    assert emu.state.webhooks.wait_idle(5)

    assert [p.status for p in pushes] == [500, 503, 200]
    assert len({p.headers["webhook-id"] for p in pushes}) == 1
    assert len({p.body for p in pushes}) == 1
    for push in pushes:
        _verify_both(push, secret)
    records = emu.state.webhooks.deliveries(session=session_id)
    assert [(r.attempt, r.status, r.outcome, r.final) for r in records] == [
        (1, 500, "failed", False),
        (2, 503, "failed", False),
        (3, 200, "delivered", True),
    ]
    gaps = [b.at - a.at for a, b in itertools.pairwise(pushes)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19  # retry_base, then twice that
    assert len(receiver.pushes()) == 3


def test_connection_refused_is_retried_with_backoff_and_the_same_webhook_id(
    emu: EmulatorServer,
) -> None:
    port = _free_port()
    webhooks = emu.state.webhooks
    secret = str(webhooks.register(f"http://127.0.0.1:{port}/late")["signing_secret"])
    webhooks.set_faults(retry_base=0.15)
    session_id = emu.state.create_session([function_call("add")])["id"]
    wait_until(lambda: len(webhooks.deliveries(session=session_id)) >= 2)

    with running_receiver(port=port) as receiver:
        (push,) = receiver.wait_for(1, timeout=10)
        assert webhooks.wait_idle(5)
        records = webhooks.deliveries(session=session_id)
        webhooks.clear()

    _verify_both(push, secret)
    failed, delivered = records[:-1], records[-1]
    assert len(failed) >= 2
    assert all(r.status is None and "ConnectError" in str(r.error) for r in failed)
    assert all(r.outcome == "failed" and not r.final for r in failed)
    assert (delivered.outcome, delivered.status, delivered.attempt) == (
        "delivered",
        200,
        len(records),
    )
    assert {r.webhook_id for r in records} == {push.headers["webhook-id"]}
    sent = [r.sent_at or 0.0 for r in records]
    assert sent[1] - sent[0] >= 0.14 and sent[2] - sent[1] >= 0.29


def test_a_slow_receiver_times_out_and_the_retry_succeeds(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(timeout=0.3, retry_base=0.2)
    receiver.delay = 1.0
    session_id = emu.state.create_session([function_call("add")])["id"]
    receiver.wait_for(1)
    receiver.delay = 0.0

    pushes = receiver.wait_for(2)
    assert emu.state.webhooks.wait_idle(5)

    first, second = emu.state.webhooks.deliveries(session=session_id)
    assert first.status is None and str(first.error).startswith("timeout")
    assert 250 <= (first.duration_ms or 0) < 900
    assert (second.status, second.outcome) == (200, "delivered")
    assert pushes[0].headers["webhook-id"] == pushes[1].headers["webhook-id"]


def test_max_attempts_then_it_gives_up(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(retry_base=0.02, max_attempts=3)
    receiver.status = 500
    session_id = emu.state.create_session([function_call("add")])["id"]

    assert emu.state.webhooks.wait_idle(5)
    time.sleep(0.2)

    assert len(receiver.pushes()) == 3
    records = emu.state.webhooks.deliveries(session=session_id)
    assert [(r.attempt, r.final) for r in records] == [(1, False), (2, False), (3, True)]
    assert records[-1].outcome == "failed"


def test_default_retry_policy_is_one_second_base_and_eight_attempts() -> None:
    faults = WebhookState().faults
    assert (faults.retry_base, faults.max_attempts) == (1.0, 8)
    assert [faults.backoff(n) for n in (1, 2, 3, 7)] == [1.0, 2.0, 4.0, 64.0]


def test_a_deleted_endpoint_gets_no_more_retries(
    emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    endpoint = emu.state.webhooks.register(receiver.url)
    emu.state.webhooks.set_faults(retry_base=0.3)
    receiver.status = 500
    emu.state.create_session([function_call("add")])
    receiver.wait_for(1)

    emu.state.webhooks.delete_endpoint(endpoint["id"])

    assert emu.state.webhooks.wait_idle(2)
    time.sleep(0.4)
    assert len(receiver.pushes()) == 1
    assert len(emu.state.webhooks.deliveries()) == 1  # no attempt made anywhere after


def test_reset_abandons_queued_and_retrying_deliveries(
    emu: EmulatorServer, receiver: WebhookReceiver, secret: str
) -> None:
    emu.state.webhooks.set_faults(delay=3000)
    emu.state.create_session([function_call("add")])
    assert emu.state.webhooks.pending() == 1
    assert not emu.state.webhooks.wait_idle(0.1)

    emu.state.reset()

    assert emu.state.webhooks.pending() == 0
    assert emu.state.webhooks.wait_idle(0.1)
    assert emu.state.webhooks.endpoints() == [] and emu.state.webhooks.deliveries() == []


def test_deliveries_never_block_session_creation(
    emu: EmulatorServer, admin: httpx.Client, receiver: WebhookReceiver, secret: str
) -> None:
    receiver.delay = 0.5  # 100 pushes take >= 6 s on 8 workers
    start = time.monotonic()
    for _ in range(50):
        emu.state.create_session([function_call("add")])
    for _ in range(50):
        assert admin.post("/sessions", json={"function_calls": [{"name": "a"}]}).status_code == 201
    elapsed = time.monotonic() - start

    assert elapsed < 3.0
    assert emu.state.webhooks.pending() > 50  # most deliveries are still under way
    assert len(receiver.pushes()) < 50
    receiver.wait_for(8)  # and they do get going meanwhile


def test_delivery_clients_load_the_ca_bundle_once(monkeypatch):
    # Each delivery worker makes its client; httpx built its TLS settings anew for each,
    # loading the CA bundle (18 ms of CPU), on the cores of the fleet under test.
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    for _ in range(5):
        sender.new_client().close()
    assert len(loads) <= 1  # none when an earlier client of this process loaded it
