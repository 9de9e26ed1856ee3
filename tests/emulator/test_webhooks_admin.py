"""``/_emulator/webhooks``: the controls a receiver's test in another process drives."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import httpx
import pytest
import standardwebhooks
from openai import OpenAI

from emulator import EmulatorServer, function_call
from emulator.webhooks import WebhookFaults, WebhookState
from emulator.webhooks.signing import new_secret
from emulator.webhooks.testing import Push, WebhookReceiver, running_receiver

pytestmark = pytest.mark.slow  # over 5 s: make test-fast leaves it out

VERIFIER = OpenAI(api_key="unused")


@pytest.fixture
def receiver(emu: EmulatorServer) -> Iterator[WebhookReceiver]:
    with running_receiver() as rx:
        yield rx
        emu.state.webhooks.clear()


@pytest.fixture
def hooks(emu: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{emu.url}/_emulator/webhooks", timeout=10.0) as client:
        yield client


def _verify_both(push: Push, secret: str) -> None:
    standardwebhooks.Webhook(secret).verify(push.body, push.headers)
    VERIFIER.webhooks.verify_signature(push.body, push.headers, secret=secret)


def test_faults_are_read_and_replaced_whole(hooks: httpx.Client, emu: EmulatorServer) -> None:
    assert hooks.get("/faults").json() == WebhookFaults().to_json()

    put = hooks.put("/faults", json={"duplicate": 0.5, "retry_base": 0.1, "seed": 9})
    again = hooks.put("/faults", json={"drop": 0.25})

    assert put.status_code == 200 and put.json()["duplicate"] == 0.5
    assert again.json() == {**WebhookFaults().to_json(), "drop": 0.25}
    assert emu.state.webhooks.faults == WebhookFaults(drop=0.25)
    for bad in ({"nope": 1}, {"drop": 3}, {"max_attempts": "x"}):
        answer = hooks.put("/faults", json=bad)
        assert answer.status_code == 400, bad
        assert answer.json()["error"]["code"] == "invalid_admin_request"
    assert emu.state.webhooks.faults == WebhookFaults(drop=0.25)


def test_register_an_endpoint_without_the_api(
    hooks: httpx.Client, emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    answer = hooks.post("/endpoints", json={"url": receiver.url})

    assert answer.status_code == 201
    endpoint = answer.json()
    assert endpoint["event_types"] == ["agent.session.action_required"]
    emu.state.create_session([function_call("add")])
    _verify_both(receiver.wait_for(1)[0], endpoint["signing_secret"])
    listed = hooks.get("/endpoints").json()["data"]
    assert [(e["id"], e["signing_secret"]) for e in listed] == [
        (endpoint["id"], endpoint["signing_secret"])
    ]


def test_register_with_a_chosen_secret_and_refuse_bad_ones(
    hooks: httpx.Client, emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    chosen = new_secret()
    answer = hooks.post("/endpoints", json={"url": receiver.url, "signing_secret": chosen})
    assert answer.json()["signing_secret"] == chosen

    emu.state.create_session([function_call("add")])
    _verify_both(receiver.wait_for(1)[0], chosen)
    for bad in ("secret", "whsec_", "whsec_not base64!", 5):
        refused = hooks.post("/endpoints", json={"url": receiver.url, "signing_secret": bad})
        assert refused.status_code == 400, bad
    assert hooks.post("/endpoints", json={"url": receiver.url, "colour": 1}).status_code == 400
    assert hooks.post("/endpoints", json={"url": "nope"}).json()["error"]["param"] == "url"
    assert len(emu.state.webhooks.endpoints()) == 1


def test_in_process_register_and_sign(emu: EmulatorServer, receiver: WebhookReceiver) -> None:
    webhooks = emu.state.webhooks
    endpoint = webhooks.register(receiver.url, ["agent.session.action_required"], name="x")
    secret = endpoint["signing_secret"]
    emu.state.create_session([function_call("add")])
    (push,) = receiver.wait_for(1)

    expected = webhooks.sign(
        secret, push.headers["webhook-id"], push.headers["webhook-timestamp"], push.body
    )

    assert push.headers["webhook-signature"] == expected
    assert WebhookState.sign(secret, "id", 1, b"x") == WebhookState.sign(secret, "id", "1", "x")
    assert WebhookState.sign(secret, "id", 1, b"x") != WebhookState.sign(secret, "id", 2, b"x")


def test_deliveries_filter_by_session_and_event(
    hooks: httpx.Client, emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    hooks.post("/endpoints", json={"url": receiver.url})
    emu.state.webhooks.set_faults(retry_base=0.02, concurrency=1)  # first meets the 500
    receiver.fail_next(500)
    first = emu.state.create_session([function_call("add")])["id"]
    second = emu.state.create_session([function_call("add")])["id"]
    assert emu.state.webhooks.wait_idle(5)

    everything = hooks.get("/deliveries").json()["data"]
    mine = hooks.get("/deliveries", params={"session": first}).json()["data"]
    event_id = mine[0]["event_id"]
    by_event = hooks.get("/deliveries", params={"event": event_id}).json()["data"]

    assert len(everything) == 3
    assert {d["session_id"] for d in mine} == {first}
    assert by_event == [d for d in everything if d["event_id"] == event_id]
    assert hooks.get("/deliveries", params={"session": second}).json()["data"][0]["status"] == 200
    assert hooks.get("/deliveries", params={"offset": 2}).json()["data"] == everything[2:]
    record = everything[0]
    assert set(record) >= {
        "event_id",
        "webhook_id",
        "session_id",
        "endpoint_id",
        "url",
        "attempt",
        "sent_at",
        "status",
        "error",
        "duration_ms",
        "outcome",
    }
    assert record["url"] == receiver.url and record["duration_ms"] >= 0
    events = hooks.get("/events", params={"session": first}).json()["data"]
    assert [e["event_id"] for e in events] == [d["event_id"] for d in mine][:1]


def test_send_pushes_an_arbitrary_signed_event_to_every_endpoint(
    hooks: httpx.Client, emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    one = hooks.post("/endpoints", json={"url": receiver.url + "?1"}).json()
    two = hooks.post(
        "/endpoints", json={"url": receiver.url + "?2", "event_types": ["batch.completed"]}
    ).json()

    sent = hooks.post(
        "/send",
        json={"type": "agent.session.idle", "data": {"id": "sess_x", "environment_type": "none"}},
    )
    pushes = receiver.wait_for(2)

    assert sent.status_code == 202
    record = sent.json()
    assert record["session_id"] == "sess_x" and record["source"] == "send"
    by_path = {p.path: p for p in pushes}
    _verify_both(by_path["/webhook?1"], one["signing_secret"])
    _verify_both(by_path["/webhook?2"], two["signing_secret"])
    body = by_path["/webhook?1"].json()
    assert body["type"] == "agent.session.idle" and body["data"]["id"] == "sess_x"
    assert body["id"] == record["event_id"]


def test_send_to_one_endpoint_with_a_repeated_webhook_id(
    hooks: httpx.Client, emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    endpoint = hooks.post("/endpoints", json={"url": receiver.url}).json()
    hooks.post("/endpoints", json={"url": receiver.url + "?other"})
    data = {"id": "sess_1", "required_action": {"type": "function_call"}}
    body = {
        "type": "agent.session.action_required",
        "data": data,
        "endpoint_id": endpoint["id"],
        "webhook_id": "wh_replayed",
    }

    hooks.post("/send", json=body)
    hooks.post("/send", json=body)
    pushes = receiver.wait_for(2)
    assert emu.state.webhooks.wait_idle(5)

    assert len(receiver.pushes()) == 2 and {p.path for p in pushes} == {"/webhook"}
    assert [p.headers["webhook-id"] for p in pushes] == ["wh_replayed", "wh_replayed"]
    assert pushes[0].json()["id"] != pushes[1].json()["id"]
    for push in pushes:
        _verify_both(push, endpoint["signing_secret"])
    assert hooks.post("/send", json={**body, "endpoint_id": "we_nope"}).status_code == 404
    assert hooks.post("/send", json={"data": data}).status_code == 400
    assert hooks.post("/send", json={**body, "extra": 1}).status_code == 400


def test_send_raw_pushes_exact_bytes_and_headers_once(
    hooks: httpx.Client, emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    endpoint = hooks.post("/endpoints", json={"url": receiver.url}).json()
    emu.state.webhooks.set_faults(fail_first=3, drop=1.0)  # raw sends ignore the faults
    receiver.fail_next(401)
    forged = {
        "webhook-id": "wh_forged",
        "webhook-timestamp": str(int(time.time())),
        "webhook-signature": "v1," + base64.b64encode(b"x" * 32).decode(),
        "content-type": "application/json",
    }
    text = json.dumps({"id": "evt_f", "type": "agent.session.action_required", "data": {"id": "s"}})

    answer = hooks.post("/send_raw", json={"body": text, "headers": forged})

    assert answer.status_code == 200
    (result,) = answer.json()["data"]
    assert (result["endpoint_id"], result["status"], result["answer"]) == (
        endpoint["id"],
        401,
        "ok",
    )
    (push,) = receiver.pushes()
    assert push.body == text.encode()
    assert {k: push.headers[k] for k in forged} == forged
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(endpoint["signing_secret"]).verify(push.body, push.headers)
    (record,) = emu.state.webhooks.deliveries()
    assert (record.source, record.webhook_id, record.event_id, record.session_id) == (
        "raw",
        "wh_forged",
        "evt_f",
        "s",
    )
    assert (record.status, record.outcome, record.final) == (401, "failed", True)


def test_send_raw_takes_any_bytes_repeated_headers_and_a_bare_url(
    hooks: httpx.Client, receiver: WebhookReceiver
) -> None:
    raw = b"\xff\xfe not utf-8"
    headers = [["webhook-signature", "v1,a"], ["webhook-signature", "v1,b"]]
    answer = hooks.post(
        "/send_raw",
        json={
            "body_base64": base64.b64encode(raw).decode(),
            "headers": headers,
            "url": receiver.url,
        },
    )

    assert answer.json()["data"][0]["status"] == 200
    (push,) = receiver.pushes()
    assert push.body == raw
    assert hooks.post("/send_raw", json={"body": "x", "body_base64": "eA=="}).status_code == 400
    assert hooks.post("/send_raw", json={"body": "x"}).status_code == 400  # nowhere to send
    refused = hooks.post("/send_raw", json={"body": "x", "url": "http://127.0.0.1:9/"})
    assert refused.json()["data"][0]["status"] is None
    assert "ConnectError" in refused.json()["data"][0]["error"]


def test_wait_idle_over_http(
    hooks: httpx.Client, emu: EmulatorServer, receiver: WebhookReceiver
) -> None:
    hooks.post("/endpoints", json={"url": receiver.url})
    hooks.put("/faults", json={"delay": 300})
    emu.state.create_session([function_call("add")])

    busy = hooks.post("/wait_idle", json={"timeout": 0.05}).json()
    idle = hooks.post("/wait_idle", json={"timeout": 5}).json()

    assert busy == {"idle": False, "pending": 1}
    assert idle == {"idle": True, "pending": 0}
    assert len(receiver.pushes()) == 1


def test_emulator_reset_forgets_webhooks(
    hooks: httpx.Client, admin: httpx.Client, receiver: WebhookReceiver
) -> None:
    hooks.post("/endpoints", json={"url": receiver.url})
    hooks.put("/faults", json={"drop": 1.0})
    hooks.post("/send", json={"type": "batch.completed", "data": {"id": "batch_1"}})

    admin.post("/reset")

    assert hooks.get("/endpoints").json()["data"] == []
    assert hooks.get("/deliveries").json()["data"] == []
    assert hooks.get("/events").json()["data"] == []
    assert hooks.get("/faults").json() == WebhookFaults().to_json()
