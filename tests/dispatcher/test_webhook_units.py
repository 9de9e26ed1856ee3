"""The intake's verification and event reading, without a server."""

from __future__ import annotations

import base64
import json
import math
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from dispatcher.webhook.events import Kind, NotAnEvent, read_event
from dispatcher.webhook.verify import Unverified, secrets, unusable, verify

NEW = "whsec_" + base64.b64encode(b"n" * 32).decode()
OLD = "whsec_" + base64.b64encode(b"o" * 32).decode()
BODY = json.dumps({"type": "agent.session.idle", "data": {"id": "sess_1"}}).encode()


def headers(secret: str, body: bytes = BODY, at: float | None = None, wid: str = "msg_1") -> dict:
    when = datetime.fromtimestamp(at if at is not None else time.time(), tz=UTC)
    return {
        "Webhook-Id": wid,
        "Webhook-Timestamp": str(int(when.timestamp())),
        "Webhook-Signature": Webhook(secret).sign(wid, when, body.decode()),
    }


def test_any_secret_of_the_list_verifies_and_headers_are_case_blind():
    verify(BODY, headers(OLD), (OLD, NEW))
    verify(BODY, headers(NEW), (OLD, NEW))
    both = headers(NEW)
    both["Webhook-Signature"] += " " + headers(OLD)["Webhook-Signature"]
    verify(BODY, both, (OLD,))  # a rotated endpoint signs with both; either secret passes


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("no secret", "not set"),
        ("wrong secret", "does not match"),
        ("old", "too old"),
        ("ahead", "too new"),
        ("no id", "missing header webhook-id"),
        ("garbage", "signature"),
        ("tampered", "does not match"),
    ],
)
def test_what_does_not_verify_is_refused_with_the_reason(case, reason):
    keys, body, given = (NEW,), BODY, headers(NEW)
    if case == "no secret":
        keys = ()
    elif case == "wrong secret":
        keys = (OLD,)
    elif case == "old":
        given = headers(NEW, at=int(time.time()) - 301)
    elif case == "ahead":
        # Rounded up: truncating would leave it anywhere from 300 to 301 s ahead.
        given = headers(NEW, at=math.ceil(time.time()) + 301)
    elif case == "no id":
        del given["Webhook-Id"]
    elif case == "garbage":
        given["Webhook-Signature"] = "v1,%%%"
    elif case == "tampered":
        body = BODY + b" "
    with pytest.raises(Unverified, match=reason):
        verify(body, given, keys)


def test_a_timestamp_just_inside_the_window_passes():
    verify(BODY, headers(NEW, at=time.time() - 290), (NEW,))


def test_the_secret_list_is_read_from_the_sdks_variable():
    assert secrets({"OPENAI_WEBHOOK_SECRET": f" {OLD} , {NEW} ,"}) == (OLD, NEW)
    assert secrets({}) == ()


def test_a_whsec_secret_that_no_delivery_could_match_is_found_before_any_delivery():
    cut = NEW[:-3]  # copied short: the verifier's base64 decoding fails on every delivery
    stray = "whsec_" + "!" * 8  # decodes to no key at all
    assert unusable([OLD, NEW, "plain-text-secret"]) == []
    assert unusable([OLD, cut, stray, "whsec_"]) == [2, 3, 4]
    with pytest.raises(Unverified, match="unreadable"):  # what each delivery met before
        verify(BODY, headers(NEW), [cut])


def event(data: object, kind: str = "agent.session.action_required") -> bytes:
    return json.dumps({"id": "evt_1", "type": kind, "data": data}).encode()


def test_events_are_read_for_the_session_only():
    dispatch = read_event(event({"id": "sess_9", "required_action": {"type": "function_call"}}))
    assert (dispatch.kind, dispatch.session_id) == (Kind.DISPATCH, "sess_9")
    other = read_event(event({"id": "sess_9", "required_action": {"type": "mcp_approval_request"}}))
    assert other.kind is Kind.IGNORE and other.action == "mcp_approval_request"
    idle = read_event(event({"id": "sess_9"}, kind="agent.session.idle"))
    assert idle.kind is Kind.IGNORE and idle.label == "agent.session.idle"
    assert read_event(event({}, kind="x" * 10_000)).label == "other"


@pytest.mark.parametrize(
    "body",
    [
        b"{oops",
        b"\xff\xfe",
        b"[]",
        b'{"type": 5}',
        event(None),
        event({"id": "..", "required_action": {"type": "function_call"}}),
        event({"id": "sess_1"}),
        event({"id": ["sess_1"], "required_action": {"type": "function_call"}}),
        b'{"type": "agent.session.action_required", "data": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_what_is_not_the_event_json_is_refused(body):
    with pytest.raises(NotAnEvent):
        read_event(body)


def test_a_pushed_session_outside_the_polls_filters_is_left_alone():
    from dispatcher.models import parse_session
    from dispatcher.webhook.push import outside_filters
    from tasks.settings import Settings

    def session(agent: str, **metadata: str):
        return parse_session(
            {"id": "s", "status": "idle", "agent": {"id": agent}, "metadata": metadata}
        )

    everyone = Settings()
    assert outside_filters(session("a1"), everyone) is None
    one_agent = Settings(agent_id="a1")
    assert outside_filters(session("a1"), one_agent) is None
    assert "another agent" in outside_filters(session("a2"), one_agent)
    team = Settings(session_metadata={"team": "billing"})
    assert outside_filters(session("a1", team="billing", env="x"), team) is None
    assert "METADATA" in outside_filters(session("a1", team="ops"), team)
    assert "METADATA" in outside_filters(session("a1"), team)
