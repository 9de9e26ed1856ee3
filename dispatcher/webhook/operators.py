"""Who is deciding on the approval page: a signed session or basic auth, and CSRF tokens.

A browser attaches some credentials by itself: a cookie, and basic auth once typed in.
It attaches them to a form that another site makes it post, too. So the page's rules are:

* the JSON API takes only ``Authorization: Bearer``, which no browser sends on its own;
* the page takes a session cookie (signed in with a name and the intake token), basic auth
  (any user name, the intake token as password) or the bearer token;
* every decision posted with a cookie or basic auth carries a CSRF token bound to that
  sign-in, and is refused without it; the cookie is ``SameSite=Strict`` besides.

Nothing is stored for a session: the cookie is signed with a key derived from
``TOOLFAN_INTAKE_TOKEN``, so every intake replica reads it, and rotating the token signs
every operator out.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

#: The session cookie's name, and how long a sign-in lasts (seconds).
SESSION_COOKIE = "toolfan_operator"
SESSION_SECONDS = 8 * 3600
#: Characters of an operator's name kept (it is the approval's ``by``).
MAX_NAME = 200


class BadName(ValueError):
    """An operator name that cannot stand in an audit trail."""


@dataclass(frozen=True)
class Operator:
    """A person (or a tool) recognised on the page.

    Attributes:
        name: Who decides: written into the approval's audit trail as ``by``.
        login: What the sign-in is bound to (a session's id, or the basic-auth user).
        ambient: Whether the browser sent the credentials by itself: such a request
            needs a CSRF token to decide anything.
    """

    name: str
    login: str
    ambient: bool


def operator_name(raw: str) -> str:
    """``raw`` as an operator's name: one printable line, 1 to ``MAX_NAME`` characters.

    Raises:
        BadName: it is empty, too long, or holds control characters.
    """
    name = raw.strip()
    if not name:
        raise BadName("a name is required (it goes into the audit trail)")
    if len(name) > MAX_NAME:
        raise BadName(f"a name has at most {MAX_NAME} characters")
    if not name.isprintable():
        raise BadName("a name cannot hold control characters")
    return name


class Operators:
    """Sign-ins and CSRF tokens, all keyed by the intake token."""

    def __init__(self, token: str) -> None:
        self.token = token
        self._key = hmac.digest(token.encode(), b"toolfan approval page, v1", "sha256")

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the intake token (compared in constant time)."""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def identify(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> Operator | None:
        """The operator a request comes from, or None when it bears no valid credential."""
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            return Operator("operator", "bearer", False) if self.token_matches(value) else None
        if scheme.lower() == "basic":
            return self._basic(value)
        session = cookies.get(SESSION_COOKIE)
        return self._session(session) if session else None

    def _basic(self, value: str) -> Operator | None:
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
            name = operator_name(user or "operator")
        except (binascii.Error, UnicodeDecodeError, BadName):
            return None
        if not sep or not self.token_matches(password):
            return None
        return Operator(name, "basic:" + name, True)

    def sign_in(self, name: str, now: float | None = None) -> str:
        """A session cookie's value for ``name``, valid ``SESSION_SECONDS``."""
        expires = int((time.time() if now is None else now) + SESSION_SECONDS)
        claims = {"n": operator_name(name), "s": secrets.token_urlsafe(12), "e": expires}
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{body}.{self._sign('session', body)}"

    def _session(self, cookie: str, now: float | None = None) -> Operator | None:
        body, _, signature = cookie.partition(".")
        if not hmac.compare_digest(signature, self._sign("session", body)):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            name, sid, expires = str(claims["n"]), str(claims["s"]), float(claims["e"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            return None
        if expires <= (time.time() if now is None else now):
            return None
        return Operator(name, "session:" + sid, True)

    def csrf_token(self, operator: Operator, now: float | None = None) -> str:
        """A token for the forms shown to ``operator``, bound to its sign-in."""
        issued = str(int(time.time() if now is None else now))
        return f"{issued}.{self._sign('csrf', operator.login, issued)}"

    def csrf_ok(self, operator: Operator, given: str, now: float | None = None) -> bool:
        """Whether ``given`` is a token this sign-in was shown, and not older than it lasts."""
        issued, _, signature = given.partition(".")
        if not issued.isdigit() or not hmac.compare_digest(
            signature, self._sign("csrf", operator.login, issued)
        ):
            return False
        age = (time.time() if now is None else now) - int(issued)
        return -60 <= age <= SESSION_SECONDS

    def _sign(self, *parts: str) -> str:
        message = "\x00".join(parts).encode("utf-8", "surrogatepass")
        return _b64(hmac.digest(self._key, message, "sha256"))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
