"""The approval page: the inbox in a browser, for the people who decide.

``GET /approvals`` asked for ``text/html`` shows the pending calls (function, arguments,
session or run, age, time left, reason) with an approve and a deny form each;
``GET /approvals/{id}`` shows one in full, with its decision once taken. Operators sign in
at ``/approvals/login`` with their name and the intake token, or use basic auth (any user
name, the token as password); see :mod:`dispatcher.webhook.operators` for the rules that
keep another site from deciding in their name.

Everything shown comes from the model or the application and is treated as hostile: it is
HTML-escaped, and characters that do not print (controls, bidirectional overrides) are
shown as escapes, so arguments cannot pass for other arguments. The page has no script;
its headers forbid scripts, framing (no click-jacking of the buttons) and caching.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import parse_qs, quote

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dispatcher.webhook.operators import (
    SESSION_COOKIE,
    SESSION_SECONDS,
    BadName,
    Operator,
    Operators,
)
from tasks.approvals import Approval, ApprovalStore, State

#: Bytes of a form read at most, and characters of arguments shown in the list.
MAX_FORM, LIST_ARGUMENTS = 65_536, 2_000
#: Seconds left under which a deadline is shown as close.
CLOSE = 60

HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}

STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{display:flex;gap:1em;align-items:center;padding:.8em 1.5em;background:#1d2430;color:#fff}
header h1{font-size:1.1em;margin:0;flex:1}header a{color:#cfe0ff}
header form{margin:0}main{padding:1em 1.5em}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border-bottom:1px solid #dde1e7;padding:.5em;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
th{font-size:.85em;color:#5b6573}pre{margin:0;max-width:40em;overflow:auto;
white-space:pre-wrap;word-break:break-all;font-size:.85em}
.small{font-size:.8em;color:#5b6573;word-break:break-all}.close{color:#b3261e;font-weight:600}
.notice{background:#e6f4ea;border:1px solid #9fd3ad;padding:.6em;margin-bottom:1em}
.error{background:#fdecea;border:1px solid #f1a9a0;padding:.6em;margin-bottom:1em}
form.decide{display:flex;gap:.3em;margin:.2em 0}input[type=text],input[type=password]{
padding:.3em;border:1px solid #b8c0cc;border-radius:3px}
button{padding:.3em .8em;border:0;border-radius:3px;color:#fff;cursor:pointer}
button.approve{background:#1e7d3a}button.deny{background:#b3261e}
button.plain{background:#44526a}.login{max-width:22em;margin:3em auto;background:#fff;
padding:1.5em;border:1px solid #dde1e7}.login label{display:block;margin:.6em 0}
.login input{width:100%;box-sizing:border-box}
"""


def wants_html(accept: str) -> bool:
    """Whether an ``Accept`` header prefers HTML to JSON (a browser's does; curl's not)."""
    best = {"html": 0.0, "json": 0.0}
    for part in accept.split(",")[:50]:
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        kind = {"text/html": "html", "application/xhtml+xml": "html"}.get(media.lower())
        kind = kind or ("json" if media.lower() == "application/json" else None)
        if kind:
            best[kind] = max(best[kind], q)
    return best["html"] > 0 and best["html"] > best["json"]


def h(value: object) -> str:
    """``value`` as HTML text: escaped, and what does not print shown as an escape."""
    text = str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in text)
    return html.escape(text, quote=True)


def duration(seconds: float) -> str:
    """A span of time for people: ``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def when(epoch: float) -> str:
    """An instant in UTC, to the second."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def arguments_text(approval: Approval, limit: int | None = None) -> str:
    """The call's arguments, indented for reading (cut at ``limit`` characters)."""
    try:
        text = json.dumps(json.loads(approval.arguments), indent=2, ensure_ascii=False)
    except ValueError:
        text = approval.arguments
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n... ({len(text) - limit:,} more characters: open the call)"
    return text


class Page:
    """The page's routes, over the inbox and the operators' sign-ins."""

    def __init__(self, store: ApprovalStore, operators: Operators | None) -> None:
        self.store = store
        self.operators = operators

    # -- reading -------------------------------------------------------------------------

    async def inbox(self, request: Request) -> Response:
        """The pending calls, the nearest deadline first."""
        operator = self._operator(request)
        if not isinstance(operator, Operator):
            return operator
        try:
            pending = await run_in_threadpool(self.store.pending)
            decided_id = request.query_params.get("decided", "")
            decided = await run_in_threadpool(self.store.get, decided_id) if decided_id else None
        except redis.RedisError:
            return self._unavailable(request)
        csrf = self._csrf(operator)
        body = [self._notice(decided)] if decided else []
        if pending:
            body.append(f"<p>{len(pending)} call{'s' if len(pending) != 1 else ''} waiting.</p>")
            body.append(self._table(request, pending, csrf))
        else:
            body.append("<p>No calls are waiting for approval.</p>")
        return self._page(request, "Approvals", "".join(body), operator, csrf)

    async def detail(self, request: Request) -> Response:
        """One call's approval in full: request, arguments, decision."""
        operator = self._operator(request)
        if not isinstance(operator, Operator):
            return operator
        aid = request.path_params["approval_id"]
        try:
            found = await run_in_threadpool(self.store.get, aid)
        except redis.RedisError:
            return self._unavailable(request)
        if found is None:
            return self._message(request, "Not found", f"There is no approval {aid[:200]}.", 404)
        csrf = self._csrf(operator)
        return self._page(request, found.id, self._card(request, found, csrf), operator, csrf)

    # -- deciding ------------------------------------------------------------------------

    async def approve(self, request: Request) -> Response:
        """A posted approve form."""
        return await self._decide(request, State.APPROVED)

    async def deny(self, request: Request) -> Response:
        """A posted deny form (its reason is required: the model is told it)."""
        return await self._decide(request, State.DENIED)

    async def _decide(self, request: Request, decision: State) -> Response:
        operator = self._operator(request, redirect=False)
        if not isinstance(operator, Operator):
            return operator
        form = await _form(request)
        if form is None:
            return self._message(request, "Bad form", "The form could not be read.", 400)
        refused = self._forged(request, operator, form)
        if refused is not None:
            return refused
        reason = form.get("reason", "").strip()
        if decision is State.DENIED and not reason:
            text = "A denial needs a reason: the model is told it."
            return self._message(request, "Reason needed", text, 400)
        aid = request.path_params["approval_id"]
        try:
            done = await run_in_threadpool(self.store.decide, aid, decision, operator.name, reason)
        except redis.RedisError:
            return self._unavailable(request)
        if done.taken:
            return self._redirect(request, f"/approvals?decided={quote(aid, safe='')}")
        if done.outcome == "unknown":
            return self._message(request, "Not found", f"There is no approval {aid[:200]}.", 404)
        if done.outcome == State.TIMED_OUT.value:
            text = "This call timed out before your decision; it was not run."
        else:
            text = f"This call was {done.outcome} already, by {done.by}; nothing changed."
        return self._message(request, "Already decided", text, 409)

    def _forged(
        self, request: Request, operator: Operator, form: dict[str, str]
    ) -> Response | None:
        """The refusal for a decision another site may have made the browser post."""
        cross_site = request.headers.get("sec-fetch-site", "") == "cross-site"
        assert self.operators is not None  # an operator was identified
        if cross_site or (
            operator.ambient and not self.operators.csrf_ok(operator, form.get("csrf", ""))
        ):
            text = "This form did not come from this page, or it is too old. Reload the page."
            return self._message(request, "Refused", text, 403)
        return None

    # -- signing in ----------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        """The sign-in form."""
        if self.operators is None:
            return self._disabled(request)
        return self._login(request)

    async def login(self, request: Request) -> Response:
        """A posted sign-in: a name and the intake token."""
        if self.operators is None:
            return self._disabled(request)
        form = await _form(request)
        if form is None:
            return self._login(request, "The form could not be read.", 400)
        if not self.operators.token_matches(form.get("token", "")):
            return self._login(request, "That is not the intake token.", 401)
        try:
            cookie = self.operators.sign_in(form.get("name", ""))
        except BadName as exc:
            return self._login(request, str(exc).capitalize() + ".", 400)
        response = self._redirect(request, "/approvals")
        response.set_cookie(
            SESSION_COOKIE,
            cookie,
            max_age=SESSION_SECONDS,
            path=self._root(request) + "/approvals",
            secure=_https(request),
            httponly=True,
            samesite="strict",
        )
        return response

    async def basic(self, request: Request) -> Response:
        """Sign in with the browser's own prompt (basic auth), then go to the inbox."""
        if self.operators is None:
            return self._disabled(request)
        found = self.operators.identify(request.headers, {})
        if found is not None:
            return self._redirect(request, "/approvals")
        response = self._login(request, "Sign in with any user name and the intake token.", 401)
        response.headers["www-authenticate"] = 'Basic realm="toolfan approvals", charset="UTF-8"'
        return response

    async def logout(self, request: Request) -> Response:
        """Sign out (the session's cookie is dropped)."""
        operator = self._operator(request, redirect=False)
        if not isinstance(operator, Operator):
            return operator
        form = await _form(request) or {}
        refused = self._forged(request, operator, form)
        if refused is not None:
            return refused
        response = self._redirect(request, "/approvals/login")
        response.delete_cookie(SESSION_COOKIE, path=self._root(request) + "/approvals")
        return response

    # -- pieces --------------------------------------------------------------------------

    def _operator(self, request: Request, redirect: bool = True) -> Operator | Response:
        """The operator, or what to answer someone who has not signed in."""
        if self.operators is None:
            return self._disabled(request)
        found = self.operators.identify(request.headers, request.cookies)
        if found is not None:
            return found
        if redirect and request.method == "GET":
            return self._redirect(request, "/approvals/login")
        text = "Sign in first: your session is over, or the intake token has changed."
        return self._message(request, "Sign in", text, 401, login_link=True)

    def _csrf(self, operator: Operator) -> str:
        assert self.operators is not None
        return self.operators.csrf_token(operator)

    def _table(self, request: Request, pending: Iterable[Approval], csrf: str) -> str:
        now = time.time()
        rows = []
        for a in pending:
            left = a.seconds_left(now)
            rows.append(
                "<tr>"
                f'<td><a href="{self._url(request, "/approvals/" + quote(a.id, safe=""))}">'
                f"<b>{h(a.function)}</b></a><div class=small>{h(a.id)}</div></td>"
                f"<td><pre>{h(arguments_text(a, LIST_ARGUMENTS))}</pre>"
                f"<div class=small>digest {h(a.digest[:16])}</div></td>"
                f"<td>{h(a.source)} <span class=small>{h(a.batch_id[:300])}</span>"
                f"{_agent(a)}</td>"
                f'<td title="{h(when(a.asked_at))}">{duration(now - a.asked_at)} ago</td>'
                f'<td class="{"close" if left < CLOSE else ""}" title="{h(when(a.deadline))}">'
                f"{duration(left)}</td>"
                f"<td>{h(a.reason[:500])}</td>"
                f"<td>{self._forms(request, a, csrf)}</td>"
                "</tr>"
            )
        head = "".join(
            f"<th>{t}</th>"
            for t in ("Function", "Arguments", "Session", "Asked", "Time left", "Why", "Decide")
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"

    def _forms(self, request: Request, a: Approval, csrf: str) -> str:
        base = self._url(request, "/approvals/" + quote(a.id, safe=""))
        token = f'<input type=hidden name=csrf value="{h(csrf)}">'
        return (
            f'<form class=decide method=post action="{base}/approve">{token}'
            '<input type=text name=reason placeholder="note (optional)" aria-label="note">'
            f'<button class=approve type=submit name=approve value="{h(a.id)}">Approve</button>'
            "</form>"
            f'<form class=decide method=post action="{base}/deny">{token}'
            '<input type=text name=reason required placeholder="reason (the model is told)" '
            'aria-label="reason">'
            f'<button class=deny type=submit name=deny value="{h(a.id)}">Deny</button></form>'
        )

    def _card(self, request: Request, a: Approval, csrf: str) -> str:
        now = time.time()
        rows: list[tuple[str, str]] = [
            ("Function", f"<b>{h(a.function)}</b>"),
            ("State", h(a.state.value)),
            ("Source", h(a.source)),
            ("Session or run", h(a.batch_id)),
            ("Turn", h(a.turn_id)),
            ("Call", h(a.call_id)),
            ("Agent", h(a.agent_id)),
            ("Why", h(a.reason)),
            ("Asked", f"{h(when(a.asked_at))} ({duration(now - a.asked_at)} ago)"),
            ("Deadline", f"{h(when(a.deadline))} ({duration(a.seconds_left(now))} left)"),
            ("Digest", f"<code>{h(a.digest)}</code>"),
            ("Arguments", f"<pre>{h(arguments_text(a))}</pre>"),
        ]
        if a.metadata:
            rows.append(("Metadata", f"<pre>{h(json.dumps(a.metadata, indent=2))}</pre>"))
        if a.decided_at is not None:
            decided = f"{h(a.state.value)} by {h(a.by)} at {h(when(a.decided_at))}"
            rows.append(
                ("Decision", decided + (f": {h(a.decision_reason)}" if a.decision_reason else ""))
            )
        if a.state is State.PENDING:
            rows.append(("Decide", self._forms(request, a, csrf)))
        cells = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
        back = self._url(request, "/approvals")
        return f'<p><a href="{back}">All pending calls</a></p><table>{cells}</table>'

    def _notice(self, a: Approval) -> str:
        if a.state is State.PENDING:
            return ""
        return (
            f"<div class=notice>{h(a.function)} ({h(a.id)}): {h(a.state.value)}"
            f"{' by ' + h(a.by) if a.by else ''}.</div>"
        )

    def _page(
        self, request: Request, title: str, body: str, operator: Operator | None, csrf: str = ""
    ) -> HTMLResponse:
        bar = ""
        if operator is not None:
            bar = f"<span>Signed in as {h(operator.name)}</span>"
            bar += f'<a href="{self._url(request, "/approvals")}">Refresh</a>'
            if operator.login.startswith("session:"):
                bar += (
                    f'<form method=post action="{self._url(request, "/approvals/logout")}">'
                    f'<input type=hidden name=csrf value="{h(csrf)}">'
                    "<button class=plain type=submit>Sign out</button></form>"
                )
        return self._html(
            f"<header><h1>toolfan &middot; {h(title)}</h1>{bar}</header><main>{body}</main>",
            title,
        )

    def _login(self, request: Request, error: str = "", status: int = 200) -> HTMLResponse:
        problem = f"<div class=error>{h(error)}</div>" if error else ""
        body = (
            f'<form class=login method=post action="{self._url(request, "/approvals/login")}">'
            f"<h2>Sign in to decide</h2>{problem}"
            "<label>Your name (kept with each decision)<input type=text name=name required "
            f"maxlength=200 autocomplete=username></label>"
            "<label>Intake token<input type=password name=token required "
            "autocomplete=current-password></label>"
            "<button class=approve type=submit>Sign in</button>"
            f'<p class=small>Or <a href="{self._url(request, "/approvals/login/basic")}">'
            "use your browser's sign-in prompt</a> (basic auth: any user name, the intake "
            "token as password).</p></form>"
        )
        return self._html(
            f"<header><h1>toolfan &middot; approvals</h1></header>{body}", "Sign in", status
        )

    def _message(
        self, request: Request, title: str, text: str, status: int, login_link: bool = False
    ) -> HTMLResponse:
        link = "/approvals/login" if login_link else "/approvals"
        label = "Sign in" if login_link else "Back to the pending calls"
        body = f'<p>{h(text)}</p><p><a href="{self._url(request, link)}">{label}</a></p>'
        return self._html(
            f"<header><h1>toolfan &middot; {h(title)}</h1></header><main>{body}</main>",
            title,
            status,
        )

    def _disabled(self, request: Request) -> HTMLResponse:
        text = "The approval page is off: set TOOLFAN_INTAKE_TOKEN on the intake to enable it."
        return self._html(f"<main><p>{h(text)}</p></main>", "Off", 403)

    def _unavailable(self, request: Request) -> HTMLResponse:
        text = "toolfan cannot reach its Redis right now. Try again in a moment."
        return self._message(request, "Unavailable", text, 503)

    def _html(self, body: str, title: str, status: int = 200) -> HTMLResponse:
        document = (
            f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{h(title)} "
            f'- toolfan</title><meta name=viewport content="width=device-width">'
            f"<style>{STYLE}</style></head><body>{body}</body></html>"
        )
        return HTMLResponse(document, status, headers=HEADERS)

    def _redirect(self, request: Request, path: str) -> Response:
        return RedirectResponse(self._url(request, path), 303, headers=HEADERS)

    def _url(self, request: Request, path: str) -> str:
        return h(self._root(request) + path)

    @staticmethod
    def _root(request: Request) -> str:
        """The prefix a reverse proxy serves the intake under (uvicorn's ``--root-path``)."""
        return str(request.scope.get("root_path", "")).rstrip("/")


def _agent(a: Approval) -> str:
    return f"<div class=small>agent {h(a.agent_id[:200])}</div>" if a.agent_id else ""


def _https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "")
    return request.url.scheme == "https" or forwarded.split(",")[0].strip() == "https"


async def _form(request: Request) -> dict[str, str] | None:
    """A posted urlencoded form's fields (the first of each), or None when unreadable."""
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM:
            return None
    try:
        fields = parse_qs(
            raw.decode("ascii"), keep_blank_values=True, max_num_fields=20, errors="strict"
        )
    except ValueError:
        return None
    return {name: values[0] for name, values in fields.items()}


def is_form(request: Request) -> bool:
    """Whether a POST is a browser form (decided here) rather than the JSON API's."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind in ("application/x-www-form-urlencoded", "multipart/form-data")
