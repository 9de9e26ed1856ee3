"""The approval page over a real Redis, driven through the intake's ASGI app.

What it guards: only a signed-in operator sees or decides; a decision posted without this
sign-in's CSRF token (what another site could make a browser post) changes nothing; the
JSON API never takes the browser's ambient credentials; hostile arguments reach the page
escaped. The browser test (tests/e2e/test_approval_page.py) drives the same page in
Chromium against a real worker.
"""

from __future__ import annotations

import base64
import re
import time

import pytest
from starlette.testclient import TestClient

from dispatcher.webhook.app import IntakeConfig, build_app
from dispatcher.webhook.operators import SESSION_COOKIE, SESSION_SECONDS, Operators
from dispatcher.webhook.page import h, wants_html
from handlers.context import CallContext
from tasks.approvals import ApprovalStore, State

TOKEN = "page-token-0123456789"
HTML = {"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def app_client(redis_client, token: str | None = TOKEN) -> TestClient:
    config = IntakeConfig(redis_client, 1 << 20, (), token)
    return TestClient(build_app(config), base_url="http://intake.test", follow_redirects=False)


def ask(redis_client, function: str = "erase", arguments: dict | None = None, timeout=600.0):
    ctx = CallContext("agents", "sess_page", "turn_1", f"call_{time.time_ns()}", function)
    store = ApprovalStore(redis_client, 3600)
    approval, _ = store.ask(ctx, arguments or {"key": "k1"}, "the tool requires it", timeout, 5)
    return store, approval


def signed_in(client: TestClient, name: str = "alice") -> TestClient:
    answer = client.post("/approvals/login", data={"name": name, "token": TOKEN})
    assert answer.status_code == 303 and answer.headers["location"] == "/approvals"
    return client


def csrf_of(page: str) -> str:
    return re.search(r'name=csrf value="([^"]+)"', page).group(1)


def test_a_browser_is_sent_to_sign_in_and_the_api_still_answers_json(redis_client):
    client = app_client(redis_client)
    to_login = client.get("/approvals", headers=HTML)
    assert to_login.status_code == 303 and to_login.headers["location"] == "/approvals/login"
    form = client.get("/approvals/login", headers=HTML)
    assert form.status_code == 200 and "name=token" in form.text
    assert "frame-ancestors 'none'" in form.headers["content-security-policy"]
    assert form.headers["x-frame-options"] == "DENY" and form.headers["cache-control"] == "no-store"
    assert client.get("/approvals").status_code == 401  # JSON, no token
    assert client.get("/approvals", headers={"accept": "application/json"}).json() == {
        "error": "a valid bearer token is required"
    }


def test_signing_in_needs_the_token_and_a_name(redis_client):
    client = app_client(redis_client)
    wrong = client.post("/approvals/login", data={"name": "alice", "token": "nope"})
    assert wrong.status_code == 401 and "not the intake token" in wrong.text
    assert SESSION_COOKIE not in wrong.cookies
    nameless = client.post("/approvals/login", data={"name": " ", "token": TOKEN})
    assert nameless.status_code == 400 and "name is required" in nameless.text
    control = client.post("/approvals/login", data={"name": "al\x1bice", "token": TOKEN})
    assert control.status_code == 400
    ok = client.post("/approvals/login", data={"name": "alice", "token": TOKEN})
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/approvals" in cookie
    assert f"Max-Age={SESSION_SECONDS}" in cookie


def test_the_inbox_lists_the_call_and_a_form_decides_it_once(redis_client):
    store, approval = ask(redis_client, arguments={"key": "k1", "note": "<b>bold</b>"})
    client = signed_in(app_client(redis_client))
    page = client.get("/approvals", headers=HTML)
    assert page.status_code == 200 and "Signed in as alice" in page.text
    assert "erase" in page.text and approval.id in page.text and "sess_page" in page.text
    assert "&lt;b&gt;bold&lt;/b&gt;" in page.text and "<b>bold</b>" not in page.text
    assert re.search(r"\d+ min \d+ s</td>", page.text)  # time left, about 10 minutes
    done = client.post(
        f"/approvals/{approval.id}/approve", data={"csrf": csrf_of(page.text), "reason": "ok"}
    )
    assert done.status_code == 303 and done.headers["location"].endswith(approval.id)
    after = client.get(done.headers["location"], headers=HTML)
    assert "approved by alice" in after.text and "No calls are waiting" in after.text
    decided = store.get(approval.id)
    assert (decided.state, decided.by, decided.decision_reason) == (State.APPROVED, "alice", "ok")
    again = client.post(
        f"/approvals/{approval.id}/deny", data={"csrf": csrf_of(page.text), "reason": "no"}
    )
    assert again.status_code == 409 and "approved already, by alice" in again.text


def test_a_post_without_this_sign_ins_csrf_token_changes_nothing(redis_client):
    store, approval = ask(redis_client)
    alice = signed_in(app_client(redis_client))
    mallory = signed_in(app_client(redis_client), "mallory")
    theirs = csrf_of(mallory.get("/approvals", headers=HTML).text)
    url = f"/approvals/{approval.id}/approve"
    for form in ({"reason": ""}, {"csrf": ""}, {"csrf": "123.abc"}, {"csrf": theirs}):
        refused = alice.post(url, data=form)
        assert refused.status_code == 403 and "did not come from this page" in refused.text
    mine = csrf_of(alice.get("/approvals", headers=HTML).text)
    cross = alice.post(url, data={"csrf": mine}, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    assert store.get(approval.id).state is State.PENDING
    # The JSON API takes the bearer token only: the browser's cookie decides nothing there.
    api = alice.post(url, json={"by": "alice"})
    assert api.status_code == 401 and store.get(approval.id).state is State.PENDING


def test_a_denial_needs_a_reason_and_is_kept_with_who_gave_it(redis_client):
    store, approval = ask(redis_client)
    client = signed_in(app_client(redis_client), "dana")
    csrf = csrf_of(client.get("/approvals", headers=HTML).text)
    url = f"/approvals/{approval.id}/deny"
    assert client.post(url, data={"csrf": csrf, "reason": "  "}).status_code == 400
    assert store.get(approval.id).state is State.PENDING
    assert client.post(url, data={"csrf": csrf, "reason": "not today"}).status_code == 303
    decided = store.get(approval.id)
    assert (decided.state, decided.by, decided.decision_reason) == (
        State.DENIED,
        "dana",
        "not today",
    )


def test_basic_auth_signs_in_with_the_token_as_password(redis_client):
    store, approval = ask(redis_client)
    client = app_client(redis_client)
    prompt = client.get("/approvals/login/basic", headers=HTML)
    assert prompt.status_code == 401 and prompt.headers["www-authenticate"].startswith("Basic")
    bad = {**HTML, "authorization": "Basic " + base64.b64encode(b"erin:wrong").decode()}
    assert client.get("/approvals", headers=bad).status_code == 303  # to the sign-in
    auth = {**HTML, "authorization": "Basic " + base64.b64encode(f"erin:{TOKEN}".encode()).decode()}
    page = client.get("/approvals", headers=auth)
    assert page.status_code == 200 and "Signed in as erin" in page.text
    url = f"/approvals/{approval.id}/approve"
    assert client.post(url, data={"reason": ""}, headers=auth).status_code == 403  # ambient
    assert client.post(url, data={"csrf": csrf_of(page.text)}, headers=auth).status_code == 303
    assert store.get(approval.id).by == "erin"


def test_a_tampered_expired_or_stale_sign_in_is_no_sign_in(redis_client):
    operators = Operators(TOKEN)
    cookie = operators.sign_in("alice")
    assert operators.identify({}, {SESSION_COOKIE: cookie}).name == "alice"
    _, _, signature = cookie.partition(".")
    forged = base64.urlsafe_b64encode(b'{"n":"root","s":"x","e":9999999999}').decode()
    assert operators.identify({}, {SESSION_COOKIE: f"{forged.rstrip('=')}.{signature}"}) is None
    old = operators.sign_in("alice", now=time.time() - SESSION_SECONDS - 1)
    assert operators.identify({}, {SESSION_COOKIE: old}) is None
    assert Operators("rotated-token").identify({}, {SESSION_COOKIE: cookie}) is None
    client = app_client(redis_client)
    client.cookies.set(SESSION_COOKIE, old)
    assert client.get("/approvals", headers=HTML).status_code == 303


def test_without_a_token_the_page_is_off(redis_client):
    client = app_client(redis_client, token=None)
    for path in ("/approvals", "/approvals/login"):
        off = client.get(path, headers=HTML)
        assert off.status_code == 403 and "TOOLFAN_INTAKE_TOKEN" in off.text
    assert client.post("/approvals/login", data={"name": "a", "token": ""}).status_code == 403


def test_one_call_shows_in_full_with_its_decision(redis_client):
    big = {"key": "k", "blob": "x" * 5_000}
    store, approval = ask(redis_client, arguments=big)
    client = signed_in(app_client(redis_client))
    listed = client.get("/approvals", headers=HTML).text
    assert "more characters: open the call" in listed and "x" * 5_000 not in listed
    one = client.get(f"/approvals/{approval.id}", headers=HTML)
    assert "x" * 5_000 in one.text and approval.digest in one.text and "Approve" in one.text
    store.decide(approval.id, State.DENIED, "bob", "too big")
    decided = client.get(f"/approvals/{approval.id}", headers=HTML).text
    assert "denied by bob" in decided and "too big" in decided and "Approve</button>" not in decided
    assert client.get("/approvals/apr_nope", headers=HTML).status_code == 404


def test_a_timed_out_call_cannot_be_decided_on_the_page(redis_client):
    _, approval = ask(redis_client, timeout=0.5)
    client = signed_in(app_client(redis_client))
    page = client.get(f"/approvals/{approval.id}", headers=HTML).text
    csrf = csrf_of(page)
    time.sleep(1)
    late = client.post(f"/approvals/{approval.id}/approve", data={"csrf": csrf})
    assert late.status_code == 409 and "timed out before your decision" in late.text


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", True),
        ("*/*", False),
        ("", False),
        ("application/json", False),
        ("application/json, text/html;q=0.5", False),
        ("text/html;q=0", False),
        ("text/html;q=bogus", False),
        ("TEXT/HTML", True),
    ],
)
def test_the_page_is_for_whoever_prefers_html(accept, html):
    assert wants_html(accept) is html


def test_what_does_not_print_is_shown_as_an_escape():
    assert h("<script>") == "&lt;script&gt;"
    assert h("pay \u202emoc.live") == "pay \\u202emoc.live"  # no bidi override reaches the page
    assert h("a\x1b[31mb\nc") == "a\\x1b[31mb\nc"
    assert h('"quoted"') == "&quot;quoted&quot;"


def test_behind_a_proxys_prefix_the_links_and_the_cookie_follow_it(redis_client):
    config = IntakeConfig(redis_client, 1 << 20, (), TOKEN)
    client = TestClient(build_app(config), root_path="/tf", follow_redirects=False)
    assert client.get("/approvals", headers=HTML).headers["location"] == "/tf/approvals/login"
    done = client.post("/approvals/login", data={"name": "bob", "token": TOKEN})
    assert done.headers["location"] == "/tf/approvals"
    assert "Path=/tf/approvals" in done.headers["set-cookie"]
