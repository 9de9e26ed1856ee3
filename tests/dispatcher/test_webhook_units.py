"""The intake's verification and event reading, without a server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from dispatcher.webhook.budget import Budget, OverBudget
from dispatcher.webhook.events import Kind, NotAnEvent, read_event
from dispatcher.webhook.throttle import Throttle
from dispatcher.webhook.verify import Unverified, check_headers, secrets, unusable, verify

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


@pytest.mark.parametrize(
    ("stamp", "passes"),
    [
        ("{now}", True),
        (" {now} ", True),
        ("+{now}", True),
        ("{under}", True),  # int() reads an underscore between digits, and so does the SDK
        ("{old}", True),
        ("{soon}", True),
        ("{stale}", False),
        ("{ahead}", False),
        ("x", False),
        ("", False),
        ("1.5", False),
        ("1" * 5000, False),  # past int()'s digit limit: a ValueError, not a hang
    ],
)
def test_the_headers_check_refuses_exactly_what_the_sdks_verifier_refuses(stamp, passes):
    """Checked before the body arrives, the headers refuse no delivery that would verify.

    The SDK signs the timestamp as written, so each spelling is signed as itself here: the
    verifier's answer then rests on the timestamp alone, and the check must agree with it.
    """
    now = int(time.time())
    spelled = {"old": now - 290, "soon": now + 290, "stale": now - 310, "ahead": now + 310}
    stamp = stamp.format(now=now, under=f"{str(now)[:4]}_{str(now)[4:]}", **spelled)
    given = headers(NEW)
    given["Webhook-Timestamp"] = stamp
    given["Webhook-Signature"] = _sign_as_written(stamp)
    assert _passes(lambda: verify(BODY, given, (NEW,))) is passes
    assert _passes(lambda: check_headers(given, (NEW,))) is passes


def _passes(check) -> bool:
    try:
        check()
    except Unverified:
        return False
    return True


def _sign_as_written(stamp: str) -> str:
    """A v1 signature over ``msg_1.<stamp>.<BODY>``, the timestamp spelled as given."""
    key = base64.b64decode(NEW[len("whsec_") :])
    signed = f"msg_1.{stamp}.{BODY.decode()}".encode()
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def test_the_budget_counts_what_each_request_holds_and_gives_it_back():
    budget = Budget(1000)
    with budget.hold() as first:
        first.take(600)
        with budget.hold() as second:
            second.take(300)
            with pytest.raises(OverBudget):
                second.take(101)  # 1,001: refused, and not counted
            assert budget.held == 900
        assert budget.held == 600, "the second request's bytes came back as it ended"
        first.take(400)
        assert budget.held == 1000
    assert budget.held == 0

    def cut_short() -> None:
        with budget.hold() as third:
            third.take(10)
            raise ConnectionResetError  # as a client gone mid-body raises through the read

    with pytest.raises(ConnectionResetError):
        cut_short()
    assert budget.held == 0


def test_a_throttled_line_is_due_once_a_window_with_the_count_since_the_last():
    now = [50.0]
    throttle = Throttle(60.0, lambda: now[0])
    assert throttle.due() == 1
    assert [throttle.due() for _ in range(4)] == [None] * 4
    now[0] += 59.9
    assert throttle.due() is None
    now[0] += 0.1
    assert throttle.due() == 6


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


def test_clients_gone_mid_request_are_one_line_a_minute(monkeypatch, caplog):
    import asyncio
    import logging

    from starlette.requests import ClientDisconnect, Request

    from dispatcher.webhook import app

    now = [0.0]
    monkeypatch.setattr(app, "_GONE", Throttle(60.0, lambda: now[0]))
    scope = {"type": "http", "method": "POST", "path": "/webhooks/openai", "headers": []}
    request = Request(scope)
    with caplog.at_level(logging.INFO, logger="toolfan.webhook"):
        for _ in range(50):  # a client closing connections as fast as it opens them
            assert asyncio.run(app._gone(request, ClientDisconnect())).status_code == 400
        now[0] += 60.0
        asyncio.run(app._gone(request, ClientDisconnect()))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "the client went away before its request arrived whole (1 such" in lines[0]
    assert "(50 such requests since the last such line)" in lines[1]


def test_deliveries_refused_unverified_are_one_line_a_minute(redis_client, monkeypatch, caplog):
    """Anyone can send forged deliveries: each is counted, the log gets a line a minute."""
    import logging

    from starlette.testclient import TestClient

    from dispatcher.webhook import app

    now = [0.0]
    monkeypatch.setattr(app, "Throttle", lambda: Throttle(60.0, lambda: now[0]))
    config = app.IntakeConfig(redis_client, 1 << 20, (NEW,), None)
    client = TestClient(app.build_app(config), base_url="http://intake.test")
    url = "/webhooks/openai"
    forged = {**headers(OLD), "Webhook-Id": "msg_forged"}
    with caplog.at_level(logging.WARNING, logger="toolfan.webhook"):
        for _ in range(30):
            assert client.post(url, content=BODY, headers={"webhook-id": "x"}).status_code == 401
            assert client.post(url, content=BODY, headers=forged).status_code == 401
        now[0] += 60.0
        assert client.post(url, content=BODY, headers=forged).status_code == 401
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("webhook-id=x refused: missing header webhook-timestamp")
    assert "(refused unverified since the last such line: 1;" in lines[0]
    assert lines[1].startswith("webhook-id=msg_forged refused: ")
    assert "does not match" in lines[1] and "since the last such line: 60;" in lines[1]
