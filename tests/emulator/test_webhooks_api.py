"""The webhook endpoints API through the official SDK: ``client.webhooks.*`` over real HTTP."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from typing import Final

import httpx
import openai
import pytest
import standardwebhooks
from openai import OpenAI
from openai.types.webhooks import AgentSessionIdleWebhookEvent

from emulator import EmulatorServer, function_call
from emulator.testing import TEST_API_KEY
from emulator.webhooks.testing import Push, WebhookReceiver, running_receiver

pytestmark = pytest.mark.slow  # about 5 s of real servers: make test-fast leaves it out

ACTION: Final = "agent.session.action_required"
VERIFIER = OpenAI(api_key="unused")


@pytest.fixture
def receiver(emu: EmulatorServer) -> Iterator[WebhookReceiver]:
    with running_receiver() as rx:
        yield rx
        emu.state.webhooks.clear()


def _verifies(push: Push, secret: str) -> bool:
    """Whether both verifiers accept the push with ``secret`` (they must agree)."""
    try:
        standardwebhooks.Webhook(secret).verify(push.body, push.headers)
        package = True
    except standardwebhooks.WebhookVerificationError:
        package = False
    try:
        VERIFIER.webhooks.verify_signature(push.body, push.headers, secret=secret)
        sdk = True
    except openai.InvalidWebhookSignatureError:
        sdk = False
    assert package == sdk, "the two verifiers disagree"
    return sdk


def test_create_answers_the_endpoint_with_a_whsec_secret_once(
    sdk: OpenAI, http: httpx.Client
) -> None:
    created = sdk.webhooks.create(
        url="https://example.com/hook", name="intake", event_types=[ACTION]
    )

    assert created.id.startswith("we_") and created.object == "webhook_endpoint"
    assert (created.name, created.url, created.event_types) == (
        "intake",
        "https://example.com/hook",
        [ACTION],
    )
    assert created.signing_secret.startswith("whsec_")
    assert len(base64.b64decode(created.signing_secret[6:], validate=True)) == 32
    assert created.signing_secret_hint and created.signing_secret.endswith(
        created.signing_secret_hint[-4:]
    )
    assert created.updated_at == created.created_at
    raw = http.get(f"/webhook_endpoints/{created.id}").json()
    assert "signing_secret" not in raw
    assert set(raw) == {
        "id",
        "object",
        "created_at",
        "updated_at",
        "event_types",
        "name",
        "url",
        "signing_secret_hint",
    }
    assert sdk.webhooks.retrieve(created.id).signing_secret_hint == created.signing_secret_hint


def test_name_is_optional_on_the_wire_and_secrets_differ(http: httpx.Client) -> None:
    first = http.post(
        "/webhook_endpoints", json={"url": "https://a.example", "event_types": [ACTION]}
    )
    second = http.post(
        "/webhook_endpoints", json={"url": "https://b.example", "event_types": [ACTION]}
    )

    assert first.status_code == 200 and first.json()["name"] == ""
    assert first.json()["signing_secret"] != second.json()["signing_secret"]


def test_list_pages_newest_first_through_the_sdk(emu: EmulatorServer, sdk: OpenAI) -> None:
    created = [
        sdk.webhooks.create(url=f"https://h{i}.example", name=str(i), event_types=[ACTION]).id
        for i in range(25)
    ]

    listed = [e.id for e in sdk.webhooks.list(limit=10)]

    assert listed == created[::-1]
    pages = emu.state.requests("/webhook_endpoints", "GET")
    assert len(pages) == 3 and "after=" in pages[1].query
    first = sdk.webhooks.list(limit=10)
    assert first.has_more is True and len(first.data) == 10
    assert sdk.webhooks.list(limit=5, after=created[5]).data[0].id == created[4]


def test_list_refuses_bad_limit_and_unknown_cursor(http: httpx.Client) -> None:
    for query in ("limit=0", "limit=101", "limit=x", "after=we_nope"):
        answer = http.get(f"/webhook_endpoints?{query}")
        assert answer.status_code == 400, query
        assert answer.json()["error"]["param"] in {"limit", "after"}
    empty = http.get("/webhook_endpoints").json()
    assert empty == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }


def test_update_changes_fields_and_advances_updated_at_only_on_a_change(sdk: OpenAI) -> None:
    created = sdk.webhooks.create(url="https://a.example", name="a", event_types=[ACTION])
    time.sleep(1.1)  # updated_at has second resolution

    same = sdk.webhooks.update(created.id, name="a")
    changed = sdk.webhooks.update(
        created.id,
        name="b",
        url="https://b.example/hook",
        event_types=["agent.session.idle", ACTION],
    )

    assert same.updated_at == created.updated_at
    assert changed.updated_at is not None and changed.updated_at > created.created_at
    assert (changed.name, changed.url, changed.event_types) == (
        "b",
        "https://b.example/hook",
        ["agent.session.idle", ACTION],
    )
    assert sdk.webhooks.retrieve(created.id).name == "b"
    assert sdk.webhooks.update(created.id, url="https://c.example").name == "b"  # partial update


def test_delete_answers_the_deleted_object_then_404(sdk: OpenAI) -> None:
    created = sdk.webhooks.create(url="https://a.example", name="a", event_types=[ACTION])

    deleted = sdk.webhooks.delete(created.id)

    assert (deleted.id, deleted.deleted, deleted.object) == (
        created.id,
        True,
        "webhook_endpoint.deleted",
    )
    with pytest.raises(openai.NotFoundError) as info:
        sdk.webhooks.retrieve(created.id)
    assert info.value.code == "not_found"
    with pytest.raises(openai.NotFoundError):
        sdk.webhooks.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.webhooks.update(created.id, name="x")
    assert list(sdk.webhooks.list()) == []


def test_unknown_ids_are_404_for_every_call(sdk: OpenAI) -> None:
    calls: list[Callable[[], object]] = [
        lambda: sdk.webhooks.retrieve("we_missing"),
        lambda: sdk.webhooks.update("we_missing", name="x"),
        lambda: sdk.webhooks.delete("we_missing"),
        lambda: sdk.webhooks.rotate_secret("we_missing"),
        lambda: sdk.webhooks.test("we_missing", event_type=ACTION),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError):
            call()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"event_types": [ACTION]}, "url"),
        ({"url": "https://a.example"}, "event_types"),
        ({"url": "ftp://a.example", "event_types": [ACTION]}, "url"),
        ({"url": "not a url", "event_types": [ACTION]}, "url"),
        ({"url": 5, "event_types": [ACTION]}, "url"),
        ({"url": "https://a.example", "event_types": []}, "event_types"),
        ({"url": "https://a.example", "event_types": "agent.session.idle"}, "event_types"),
        ({"url": "https://a.example", "event_types": [ACTION, "no.such"]}, "event_types[1]"),
        ({"url": "https://a.example", "event_types": [ACTION], "name": 3}, "name"),
        ({"url": "https://a.example", "event_types": [ACTION], "secret": "x"}, "secret"),
    ],
)
def test_create_validation_is_400_with_param(
    http: httpx.Client, body: dict[str, object], param: str
) -> None:
    answer = http.post("/webhook_endpoints", json=body)

    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert http.get("/webhook_endpoints").json()["data"] == []


def test_bad_json_and_non_object_bodies_are_400(http: httpx.Client) -> None:
    assert http.post("/webhook_endpoints", content=b"{").json()["error"]["code"] == "invalid_json"
    assert http.post("/webhook_endpoints", json=[1]).status_code == 400


def test_update_rotate_and_test_validate_their_bodies(sdk: OpenAI, http: httpx.Client) -> None:
    endpoint = sdk.webhooks.create(url="https://a.example", name="a", event_types=[ACTION])
    one = f"/webhook_endpoints/{endpoint.id}"

    assert (
        http.post(one, json={"event_types": ["nope"]}).json()["error"]["param"] == "event_types[0]"
    )
    assert http.post(one, json={"colour": "red"}).json()["error"]["code"] == "unknown_parameter"
    rotate = http.post(f"{one}/rotate_secret", json={"keep_old_secret_active_for_24_hours": "yes"})
    assert rotate.status_code == 400
    assert http.post(f"{one}/test", json={}).json()["error"]["code"] == "missing_required_parameter"
    with pytest.raises(openai.BadRequestError):
        sdk.webhooks.test(endpoint.id, event_type="no.such")  # type: ignore[arg-type]
    assert sdk.webhooks.retrieve(endpoint.id).event_types == [ACTION]


def test_bearer_is_required_but_no_beta_header(emu: EmulatorServer) -> None:
    with httpx.Client(base_url=emu.base_url, timeout=5.0) as bare:
        assert bare.get("/webhook_endpoints").status_code == 401
        answer = bare.get("/webhook_endpoints", headers={"Authorization": f"Bearer {TEST_API_KEY}"})
        assert answer.status_code == 200


def test_event_types_list(sdk: OpenAI) -> None:
    listed = sdk.webhooks.event_types.list()

    assert listed.object == "list"
    assert ACTION in listed.data and "agent.session.idle" in listed.data


def test_rotate_secret_without_keeping_the_old_one(
    emu: EmulatorServer, sdk: OpenAI, receiver: WebhookReceiver
) -> None:
    created = sdk.webhooks.create(url=receiver.url, name="r", event_types=[ACTION])

    rotated = sdk.webhooks.rotate_secret(created.id)
    emu.state.create_session([function_call("add")])
    (push,) = receiver.wait_for(1)

    assert rotated.signing_secret != created.signing_secret
    assert rotated.signing_secret_hint != created.signing_secret_hint
    assert len(push.headers["webhook-signature"].split(" ")) == 1
    assert _verifies(push, rotated.signing_secret)
    assert not _verifies(push, created.signing_secret)


def test_rotate_secret_keeping_the_old_one_signs_with_both(
    emu: EmulatorServer, sdk: OpenAI, receiver: WebhookReceiver
) -> None:
    created = sdk.webhooks.create(url=receiver.url, name="r", event_types=[ACTION])

    rotated = sdk.webhooks.rotate_secret(created.id, keep_old_secret_active_for_24_hours=True)
    emu.state.create_session([function_call("add")])
    (push,) = receiver.wait_for(1)

    signatures = push.headers["webhook-signature"].split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    assert _verifies(push, created.signing_secret)
    assert _verifies(push, rotated.signing_secret)
    # A second rotation without keeping drops both earlier secrets.
    third = sdk.webhooks.rotate_secret(created.id).signing_secret
    assert not _verifies(push, third)
    emu.state.create_session([function_call("add")])
    second = receiver.wait_for(2)[1]
    assert len(second.headers["webhook-signature"].split(" ")) == 1
    assert _verifies(second, third)
    assert not _verifies(second, created.signing_secret)
    assert not _verifies(second, rotated.signing_secret)


def test_test_sends_one_signed_sample_event_and_reports_the_status(
    emu: EmulatorServer, sdk: OpenAI, receiver: WebhookReceiver
) -> None:
    created = sdk.webhooks.create(url=receiver.url, name="t", event_types=[ACTION])

    result = sdk.webhooks.test(created.id, event_type="agent.session.idle")
    (push,) = receiver.pushes()

    assert (result.object, result.success, result.status_code) == (
        "webhook_endpoint.test",
        True,
        200,
    )
    assert (result.webhook_endpoint_id, result.event_type) == (created.id, "agent.session.idle")
    assert _verifies(push, created.signing_secret)
    event = VERIFIER.webhooks.unwrap(push.body, push.headers, secret=created.signing_secret)
    assert isinstance(event, AgentSessionIdleWebhookEvent)
    assert [d.source for d in emu.state.webhooks.deliveries()] == ["test"]

    receiver.fail_next(503)
    assert sdk.webhooks.test(created.id, event_type=ACTION).status_code == 503
    assert len(receiver.pushes()) == 2  # sent once: a test is never retried


def test_test_of_an_unreachable_endpoint_is_400(sdk: OpenAI) -> None:
    created = sdk.webhooks.create(url="http://127.0.0.1:9/hook", name="t", event_types=[ACTION])

    with pytest.raises(openai.BadRequestError) as info:
        sdk.webhooks.test(created.id, event_type=ACTION)

    assert info.value.code == "webhook_endpoint_unreachable"


def test_only_subscribed_endpoints_get_session_events(
    emu: EmulatorServer, sdk: OpenAI, receiver: WebhookReceiver
) -> None:
    sdk.webhooks.create(url=receiver.url + "?idle", name="idle", event_types=["agent.session.idle"])
    wanted = sdk.webhooks.create(url=receiver.url + "?action", name="a", event_types=[ACTION])

    emu.state.create_session([function_call("add")])

    assert emu.state.webhooks.wait_idle(5)
    assert [p.path for p in receiver.pushes()] == ["/webhook?action"]
    assert {d.endpoint_id for d in emu.state.webhooks.deliveries()} == {wanted.id}
