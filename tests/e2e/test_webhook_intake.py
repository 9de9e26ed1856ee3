"""The webhook intake over real HTTP: verified deliveries dispatch, refused ones never do.

A real ``toolfan webhook`` process on a free port, the session's worker, the emulator's
sessions. Deliveries are signed here with the ``standardwebhooks`` package (the scheme the
platform uses) and posted with httpx; every refused one is checked to have dispatched
nothing: no ledger record, no side effect, no ``webhook-id`` kept.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook

from dispatcher.devstack import Service, free_port
from emulator import function_call
from tests.conftest import worker_env
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"o" * 32).decode()
TOKEN = "intake-" + secrets.token_hex(8)
#: Seconds a sender's pooled connection idles before its next delivery: past httpx's pool
#: expiry and uvicorn's default keep-alive (5 s each).
SENDER_IDLE = 6.5


@pytest.fixture(scope="module")
def intake(emulator) -> Iterator[str]:
    """A ``toolfan webhook`` process; its base URL."""
    port = free_port()
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / "intake.log"
    env = worker_env(OPENAI_WEBHOOK_SECRET=f"{OLD_SECRET},{SECRET}", TOOLFAN_INTAKE_TOKEN=TOKEN)
    service = Service(["webhook", "--port", str(port)], log, env)
    try:
        service.wait_for_output("listening", 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        service.stop()


def event(
    session_id: str, action: str = "function_call", kind: str = "agent.session.action_required"
) -> bytes:
    body = {
        "id": f"evt_{uuid.uuid4().hex}",
        "object": "event",
        "type": kind,
        "created_at": int(time.time()),
        "data": {"id": session_id, "required_action": {"type": action}},
    }
    return json.dumps(body).encode()


def signed(
    body: bytes, secret: str = SECRET, *, at: float | None = None, wid: str | None = None
) -> dict[str, str]:
    wid = wid or f"msg_{uuid.uuid4().hex}"
    when = datetime.fromtimestamp(at if at is not None else time.time(), tz=UTC)
    signature = Webhook(secret).sign(wid, when, body.decode())
    return {
        "webhook-id": wid,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


def post(intake: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{intake}/webhooks/openai", content=body, headers=headers, timeout=10)


def waiting_session(api, key: str) -> str:
    session = api.create_session([function_call("count", {"key": key})])
    return str(session["id"])


def dispatched_nothing(api, redis_client, sid: str, key: str, wid: str) -> None:
    time.sleep(1.0)  # a dispatch would have reached the ledger well within this
    assert not list(redis_client.scan_iter(match=f"toolfan:v2:agents:call:{{{sid}}}*"))
    assert redis_client.get(f"test:runs:{key}") is None
    assert api.batches(sid) == []
    assert not redis_client.exists(f"toolfan:v2:webhook:seen:{wid}")


def test_the_listening_line_means_a_connection_is_accepted_at_once(emulator, tmp_path):
    """A supervisor or readiness check that sees the line may connect with no retry.

    The log is read every millisecond and one connection is made the moment the line is
    there: with the socket bound only inside uvicorn, after the line, this was refused.
    """
    port = free_port()
    service = Service(["webhook", "--port", str(port)], tmp_path / "intake.log", worker_env())
    try:
        wait_for(lambda: "listening" in service.log(), 30, "the listening line", 0.001)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert conn.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        service.stop()


def test_a_port_in_use_is_a_clear_error(emulator, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        service = Service(["webhook", "--port", str(port)], tmp_path / "intake.log", worker_env())
        try:
            assert service.proc.wait(30) == 2
        finally:
            service.stop()
    assert f"cannot listen on 127.0.0.1:{port}" in service.log()
    assert "Traceback" not in service.log()


def test_a_verified_delivery_dispatches_its_session_once(intake, api, redis_client):
    sid = waiting_session(api, "push-ok")
    body = event(sid)
    headers = signed(body)
    started = time.perf_counter()
    answer = post(intake, body, headers)
    assert answer.status_code == 202, answer.text
    assert answer.json()["session_id"] == sid
    wait_for(lambda: api.batches(sid), 10, "the pushed session's batch")
    assert time.perf_counter() - started < 5
    assert redis_client.get("test:runs:push-ok") == "1"
    again = post(intake, body, headers)  # the platform delivers it twice
    assert again.status_code == 200 and again.json()["outcome"] == "duplicate"
    time.sleep(0.5)
    assert len(api.batches(sid)) == 1 and redis_client.get("test:runs:push-ok") == "1"
    ttl = redis_client.ttl(f"toolfan:v2:webhook:seen:{headers['webhook-id']}")
    assert 72 * 3600 - 60 < ttl <= 72 * 3600  # the platform retries for up to 72 h


def test_a_repeat_after_the_dedup_window_is_taken_and_still_answers_once(
    emulator, api, redis_client, tmp_path
):
    """TOOLFAN_WEBHOOK_DEDUP_TTL bounds the ids kept; the ledger still answers each call once.

    The window is 2 s here, not the default 72 h, so that a repeat can arrive after it.
    """
    port = free_port()
    env = worker_env(OPENAI_WEBHOOK_SECRET=SECRET, TOOLFAN_WEBHOOK_DEDUP_TTL="2")
    service = Service(["webhook", "--port", str(port)], tmp_path / "intake.log", env)
    try:
        service.wait_for_output("listening", 30)
        intake = f"http://127.0.0.1:{port}"
        sid = waiting_session(api, "push-late")
        body = event(sid)
        headers = signed(body)
        assert post(intake, body, headers).status_code == 202
        wait_for(lambda: api.batches(sid), 10, "the pushed session's batch")
        seen = f"toolfan:v2:webhook:seen:{headers['webhook-id']}"
        assert 0 < redis_client.ttl(seen) <= 2
        wait_for(lambda: not redis_client.exists(seen), 10, "the id to be forgotten")
        reads = len(api.requests(f"/sessions/{sid}", "GET"))
        late = post(intake, body, signed(body, wid=headers["webhook-id"]))
        assert late.status_code == 202, late.text  # taken again: the window is over
        # Its push task reads the session, answered by now: nothing to dispatch.
        wait_for(lambda: len(api.requests(f"/sessions/{sid}", "GET")) > reads, 10, "the read")
        time.sleep(0.5)
        assert len(api.batches(sid)) == 1 and redis_client.get("test:runs:push-late") == "1"
    finally:
        service.stop()


def test_the_old_secret_still_verifies_while_a_secret_is_rotated(intake, api):
    sid = waiting_session(api, "push-old")
    body = event(sid)
    assert post(intake, body, signed(body, OLD_SECRET)).status_code == 202
    wait_for(lambda: api.batches(sid), 10, "the pushed session's batch")


def _forged(body: bytes) -> list[tuple[str, bytes, dict[str, str]]]:
    # Whole seconds, as the header carries them. An old timestamp only grows older on its
    # way to the intake, so 301 s is exact; one ahead shrinks by the truncation of `now` and
    # the trip (on a loaded CI machine "301 s ahead" arrived 299.x s ahead and was let in),
    # so it sits 10 s out here. The unit tests pin 301 s ahead with no trip in between.
    now = int(time.time())
    good = signed(body)
    tampered = body.replace(b'"function_call"', b'"function_call" ')
    cases = [
        ("wrong secret", body, signed(body, "whsec_" + base64.b64encode(b"x" * 32).decode())),
        ("tampered body", tampered, good),
        ("301 s old", body, signed(body, at=now - 301)),
        ("310 s ahead", body, signed(body, at=now + 310)),
        ("garbage signature", body, {**good, "webhook-signature": "v1,!!!notbase64"}),
        ("no v1 signature", body, {**good, "webhook-signature": "v2,abc"}),
    ]
    for header in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        cases.append((f"no {header}", body, {k: v for k, v in good.items() if k != header}))
    return cases


@pytest.mark.parametrize("case", range(9))
def test_a_forged_or_stale_delivery_is_refused_and_dispatches_nothing(
    intake, api, redis_client, case
):
    key = f"forged-{case}"
    sid = waiting_session(api, key)
    name, body, headers = _forged(event(sid))[case]
    answer = post(intake, body, headers)
    assert answer.status_code == 401, (name, answer.text)
    dispatched_nothing(api, redis_client, sid, key, headers.get("webhook-id", "none"))


def test_an_oversized_body_is_refused_unread(intake, api, redis_client):
    sid = waiting_session(api, "big")
    body = event(sid)[:-1] + b', "pad": "' + b"x" * 1_100_000 + b'"}'
    headers = signed(body)
    assert post(intake, body, headers).status_code == 413
    dispatched_nothing(api, redis_client, sid, "big", headers["webhook-id"])


def test_a_signed_body_that_is_not_the_event_json_is_a_bad_request(intake, api, redis_client):
    sid = waiting_session(api, "bad-json")
    for body in (
        b"{not json",
        b"[1, 2]",
        json.dumps({"type": "agent.session.action_required"}).encode(),
    ):
        headers = signed(body)
        assert post(intake, body, headers).status_code == 400
        dispatched_nothing(api, redis_client, sid, "bad-json", headers["webhook-id"])


def test_other_events_and_action_types_are_acknowledged_and_left_alone(intake, api, redis_client):
    sid = waiting_session(api, "other")
    for body in (event(sid, action="mcp_approval_request"), event(sid, kind="agent.session.idle")):
        answer = post(intake, body, signed(body))
        assert answer.status_code == 200 and answer.json()["outcome"] == "ignored"
    time.sleep(1.0)
    assert api.batches(sid) == [] and redis_client.get("test:runs:other") is None


def test_healthz_and_metrics(intake):
    health = httpx.get(f"{intake}/healthz", timeout=10)
    assert health.status_code == 200 and health.json() == {"redis": "ok", "broker": "ok"}
    metrics = httpx.get(f"{intake}/metrics", timeout=10).text
    assert "toolfan_webhook_deliveries_total" in metrics


def test_an_idle_senders_connection_outlives_its_pools_expiry(intake):
    """A sender that reuses a connection after idling must not meet one closed under it.

    Were the intake to close idle connections as soon as common clients expire theirs
    (httpx's pool: 5 s, uvicorn's default keep-alive: 5 s), a delivery sent on a connection
    the intake is closing at that moment is lost to a reset (a soak saw one attempt of
    30,802 fail unanswered without reaching the intake, most likely so). The intake keeps
    idle connections longer than such pools do.
    """
    host, port = httpx.URL(intake).host, httpx.URL(intake).port
    assert port is not None
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() and conn.sock is not None
        sock = conn.sock
        time.sleep(SENDER_IDLE)
        assert conn.sock is sock
        conn.request("GET", "/healthz")  # on the same connection: http.client never reopens
        again = conn.getresponse()
        assert again.status == 200 and json.loads(again.read()) == {"redis": "ok", "broker": "ok"}
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_connections_sending_slowly_or_nothing_are_closed_without_holding_up_others(intake):
    """A client cannot hold the intake's connections by sending nothing, or half a request.

    With the defaults: one connection sends nothing, another a head and one byte of its
    body. The second is closed 30 s after its first byte, the first 75 s after it opened
    (the keep-alive); deliveries on other connections are answered meanwhile, the closes
    are counted, and the cut body is one line at INFO, not an error.
    """
    from dispatcher.webhook.cli import KEEP_ALIVE
    from dispatcher.webhook.deadline import RECEIPT_SECONDS

    host, port = httpx.URL(intake).host, httpx.URL(intake).port
    assert port is not None
    silent = socket.create_connection((host, port), timeout=KEEP_ALIVE + 30)
    opened = time.monotonic()
    slow = socket.create_connection((host, port), timeout=KEEP_ALIVE + 30)
    slow.sendall(_head(100, signed(b"{}")) + b"{")  # headers that pass, so its body is read
    sent = time.monotonic()
    with silent, slow:
        assert httpx.get(f"{intake}/healthz", timeout=10).status_code == 200
        assert slow.recv(100) == b""
        assert RECEIPT_SECONDS - 0.5 < time.monotonic() - sent < RECEIPT_SECONDS + 5
        assert httpx.get(f"{intake}/healthz", timeout=10).status_code == 200
        assert silent.recv(100) == b""
        assert KEEP_ALIVE - 0.5 < time.monotonic() - opened < KEEP_ALIVE + 5
    metrics = httpx.get(f"{intake}/metrics", timeout=10).text
    for reason in ("silent", "slow"):
        line = f'toolfan_webhook_connections_closed_total{{reason="{reason}"}}'
        assert line in metrics, reason
    log = (Path(os.environ["TOOLFAN_TEST_TMP"]) / "intake.log").read_text()
    assert "the client went away before its request arrived whole" in log
    assert "Exception in ASGI application" not in log


def _head(length: int, headers: dict[str, str]) -> bytes:
    """A delivery's request head, announcing ``length`` bytes of body."""
    lines = [
        "POST /webhooks/openai HTTP/1.1",
        "Host: intake",
        f"Content-Length: {length}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer_head(conn: socket.socket) -> bytes:
    """The status line and headers of the answer on ``conn``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        assert chunk, data
        data += chunk
    return data.split(b"\r\n\r\n")[0]


def _pending_bytes(intake: str) -> float:
    text = httpx.get(f"{intake}/metrics", timeout=10).text
    (line,) = [x for x in text.splitlines() if x.startswith("toolfan_webhook_pending_bytes ")]
    return float(line.split()[1])


def test_a_repeated_header_is_read_once_as_the_verifier_reads_it(intake, api):
    """The check before the body and the verifier read a repeated header's first value.

    Here the first timestamp is the signed one and the second is stale: read from the last
    value, the check made before the body would refuse what the verifier passes.
    """
    sid = waiting_session(api, "repeated")
    body = event(sid)
    headers = [*signed(body).items(), ("webhook-timestamp", str(int(time.time()) - 400))]
    answer = httpx.post(f"{intake}/webhooks/openai", content=body, headers=headers, timeout=10)
    assert answer.status_code == 202, answer.text


def test_a_request_that_cannot_verify_is_refused_before_its_body_is_sent(intake):
    """Missing signature headers or a stale timestamp: 401 at once, with no body received.

    The head announces a body and none follows: before, the intake waited for the body
    (until the arrival deadline cut it) to find the headers missing.
    """
    host, port = httpx.URL(intake).host, httpx.URL(intake).port
    assert port is not None
    stale = signed(b"{}", at=time.time() - 400)
    for headers in ({"content-type": "application/json"}, stale):
        with socket.create_connection((host, port), timeout=10) as conn:
            conn.sendall(_head(1000, headers))
            assert _answer_head(conn).startswith(b"HTTP/1.1 401")


def test_bodies_received_at_once_are_bounded_and_the_room_comes_back(intake, api, redis_client):
    """With the defaults (64 MiB): bodies nobody signed fill the budget, and then a 503.

    68 connections send bodies announced at the 1 MiB limit, a million bytes each but the
    last, with headers that pass the check made before the body (their signature never
    verifies), and hold the rest back, until 1,000 bytes of the budget are left. 2,000
    bytes of a body on another connection would go over it: 503 ``busy``. (That body is
    small, so the intake has read all of it when it answers: a close with bytes unread
    would reset the connection, and could drop the answer before this test reads it.)
    Once those clients go away their bytes are given back and a delivery is taken again.
    Before the budget the intake held every such body whole, as much memory as clients
    had bandwidth to fill.
    """
    from tasks.settings import WEBHOOK_MAX_PENDING_BYTES

    host, port = httpx.URL(intake).host, httpx.URL(intake).port
    assert port is not None
    fill, chunk = WEBHOOK_MAX_PENDING_BYTES - 1_000, 1_000_000
    sizes = [chunk] * (fill // chunk) + [fill % chunk]  # 67 of a million, one of 107,864
    conns = []
    try:
        for size in sizes:
            conn = socket.create_connection((host, port), timeout=10)
            conns.append(conn)
            conn.sendall(_head(1 << 20, signed(b"{}")) + b"x" * size)
        wait_for(lambda: _pending_bytes(intake) == fill, 30, "the bodies received")
        with socket.create_connection((host, port), timeout=10) as over:
            over.sendall(_head(1 << 20, signed(b"{}")) + b"x" * 2_000)
            head = _answer_head(over)
        assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 5" in head.lower()
    finally:
        for conn in conns:
            conn.close()
    wait_for(lambda: _pending_bytes(intake) == 0, 30, "the bytes given back")
    sid = waiting_session(api, "after-busy")
    body = event(sid)
    assert post(intake, body, signed(body)).status_code == 202
    metrics = httpx.get(f"{intake}/metrics", timeout=10).text
    assert 'toolfan_webhook_deliveries_total{event="none",outcome="busy"} 1.0' in metrics
    log = (Path(os.environ["TOOLFAN_TEST_TMP"]) / "intake.log").read_text()
    assert "would go over TOOLFAN_WEBHOOK_MAX_PENDING_BYTES (67108864 bytes)" in log


def test_runs_watch_needs_the_token_and_watches_the_run(intake, redis_client):
    url = f"{intake}/runs/watch"
    pair = {"thread_id": "thread_w", "run_id": "run_w"}
    assert httpx.post(url, json=pair, timeout=10).status_code == 401
    wrong = {"authorization": "Bearer nope"}
    assert httpx.post(url, json=pair, headers=wrong, timeout=10).status_code == 401
    good = {"authorization": f"Bearer {TOKEN}"}
    answer = httpx.post(url, json=pair, headers=good, timeout=10)
    assert answer.status_code == 200 and answer.json() == {"watching": True, "new": True}
    assert redis_client.hexists("toolfan:v2:assistants:watches", json.dumps(["thread_w", "run_w"]))
    bad = httpx.post(url, json={"thread_id": "..", "run_id": "r"}, headers=good, timeout=10)
    assert bad.status_code == 400


def test_toolfan_webhook_register_list_and_delete_through_the_api(api):
    import subprocess
    import sys

    from tests.services import ROOT

    def toolfan(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dispatcher.cli", "webhook", *args],
            env=worker_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    made = toolfan("register", "https://toolfan.example.com/webhooks/openai")
    assert made.returncode == 0, made.stderr
    endpoint_id = made.stdout.split()[2]
    assert endpoint_id.startswith("we_") and "whsec_" in made.stdout
    (endpoint,) = api.webhooks.endpoints()
    assert endpoint["event_types"] == ["agent.session.action_required"]
    listed = [json.loads(line) for line in toolfan("list").stdout.splitlines()]
    assert [e["id"] for e in listed] == [endpoint_id]
    secret = made.stdout.rsplit(": ", 1)[1].strip()
    assert secret.startswith("whsec_") and len(secret) > 30
    assert secret not in json.dumps(listed), "the secret is shown once, at registration"
    assert toolfan("delete", endpoint_id).returncode == 0
    assert api.webhooks.endpoints() == []
    missing = toolfan("delete", endpoint_id)
    assert missing.returncode == 2 and "NotFoundError" in missing.stderr
    assert toolfan("register").returncode == 2


def test_a_refused_deliverys_body_is_never_logged(intake, api):
    marker = f"secret-marker-{uuid.uuid4().hex}"
    sid = waiting_session(api, "logged")
    body = event(sid)[:-1] + f', "note": "{marker}"}}'.encode()
    wrong = "whsec_" + base64.b64encode(b"w" * 32).decode()
    assert post(intake, body, signed(body, wrong)).status_code == 401
    big = body[:-1] + b', "pad": "' + b"x" * 1_100_000 + b'"}'
    assert post(intake, big, signed(big)).status_code == 413
    bad = f'{{"{marker}": '.encode()
    assert post(intake, bad, signed(bad)).status_code == 400
    time.sleep(0.5)
    log = (Path(os.environ["TOOLFAN_TEST_TMP"]) / "intake.log").read_text()
    assert "refused" in log, "the refusals are logged, with their reasons"
    assert marker not in log


def test_metrics_read_the_approval_inbox_for_the_deadline_alert(intake, redis_client):
    from handlers import CallContext
    from tasks.approvals import ApprovalStore

    def gauges() -> dict[str, float]:
        text = httpx.get(f"{intake}/metrics", timeout=10).text
        wanted = ("toolfan_approvals_pending ", "toolfan_approval_nearest_deadline_seconds ")
        lines = [line for line in text.splitlines() if line.startswith(wanted)]
        return {line.split()[0]: float(line.split()[1]) for line in lines}

    assert gauges() == {
        "toolfan_approvals_pending": 0.0,
        "toolfan_approval_nearest_deadline_seconds": float("inf"),
    }
    store = ApprovalStore(redis_client, 3600)
    for call_id, timeout in (("call_1", 600), ("call_2", 90)):
        ctx = CallContext("agents", "sess_1", "turn_1", call_id, "erase")
        store.ask(ctx, {}, "r", timeout, 15)
    now = gauges()
    assert now["toolfan_approvals_pending"] == 2.0
    assert 80 < now["toolfan_approval_nearest_deadline_seconds"] <= 90
