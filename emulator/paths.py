"""Routing on the raw request path, so an id holding any character reaches its session.

Starlette routes on the percent-decoded path, where an id's ``%2F`` has become a ``/`` that
splits the path, and uvicorn decodes with ``errors="replace"``, which turns a lone
surrogate's bytes into U+FFFD. A client percent-encodes each path segment (the official
SDK uses ``quote(value, safe="!$&'()*+,;=:@")``), so the emulator splits the raw path on
literal ``/`` and decodes each segment itself, UTF-8 with ``surrogatepass``. Query strings
get the same treatment, since a list cursor (``after``) is a session id too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from urllib.parse import quote, unquote_to_bytes

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, request_response
from starlette.types import Receive, Scope, Send

from emulator.wire import WireError

Handler = Callable[[Request], Awaitable[Response]]
_DOT_SEGMENTS = frozenset({".", ".."})


def decode_component(raw: bytes) -> str:
    r"""Percent-decode one path segment or query part; ``UnicodeDecodeError`` if not UTF-8.

    ``surrogatepass`` makes ``%ED%A0%80`` the lone surrogate ``"\ud800"``: the only way a
    client can name a string holding one, and the inverse of how such a string encodes.
    """
    return unquote_to_bytes(raw).decode("utf-8", "surrogatepass")


def raw_path(scope: Scope) -> bytes:
    """The request path exactly as sent (without the query), or a faithful stand-in."""
    raw = scope.get("raw_path")
    if raw is None:  # the ASGI server could not provide it
        return quote(str(scope["path"]), safe="/", errors="surrogatepass").encode("ascii")
    return bytes(raw).partition(b"?")[0]


def display_path(scope: Scope) -> str:
    """The raw path percent-decoded for people and log filters (``/`` of ids included)."""
    raw = raw_path(scope)
    try:
        return decode_component(raw)
    except UnicodeDecodeError:
        return unquote_to_bytes(raw).decode("utf-8", "backslashreplace")


def query_items(scope: Scope) -> list[tuple[str, str]]:
    """The query's ``(name, value)`` pairs, decoded like path segments (``+`` is a space).

    Raises:
        WireError: 400 when a part is not UTF-8 once percent-decoded.
    """
    items: list[tuple[str, str]] = []
    for part in bytes(scope.get("query_string", b"")).split(b"&"):
        if not part:
            continue
        name, _, value = part.replace(b"+", b" ").partition(b"=")
        try:
            items.append((decode_component(name), decode_component(value)))
        except UnicodeDecodeError:
            shown = unquote_to_bytes(name).decode("utf-8", "replace")
            raise WireError(
                400,
                f"Invalid query parameter '{shown}': not UTF-8 once percent-decoded.",
                code="invalid_encoding",
                param=shown,
            ) from None
    return items


def match_segments(template: list[str], path: bytes) -> dict[str, str] | None:
    """The ``{name}`` parameters if ``path`` fits ``template`` segment by segment."""
    segments = path.split(b"/")
    if len(segments) != len(template):
        return None
    params: dict[str, str] = {}
    for pattern, segment in zip(template, segments, strict=True):
        try:
            value = decode_component(segment)
        except UnicodeDecodeError:  # no str id encodes to these bytes
            return None
        if pattern.startswith("{") and pattern.endswith("}"):
            if not value or value in _DOT_SEGMENTS:
                return None
            params[pattern[1:-1]] = value
        elif value != pattern:
            return None
    return params


class RawRoute(BaseRoute):
    """A route whose ``{name}`` segments match on the raw path and take any decoded text.

    Args:
        template: The absolute path, e.g. ``/v1/agents/sessions/{session_id}/events``.
        endpoint: The handler; its ``request.path_params`` hold the decoded values.
        methods: The methods served; ``HEAD`` comes with ``GET``, as with starlette's routes.
    """

    def __init__(self, template: str, endpoint: Handler, *, methods: Collection[str]) -> None:
        self.template = template.split("/")
        self.endpoint = endpoint
        self.methods = set(methods) | ({"HEAD"} if "GET" in methods else set())
        self.app = request_response(endpoint)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """``FULL`` on a fit, ``PARTIAL`` on a fit with another method (a 405), else ``NONE``."""
        if scope["type"] != "http":
            return Match.NONE, {}
        params = match_segments(self.template, raw_path(scope))
        if params is None:
            return Match.NONE, {}
        child = {"endpoint": self.endpoint, "path_params": params}
        return (Match.FULL if scope["method"] in self.methods else Match.PARTIAL), child

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, or raise 405 for a method this route does not take."""
        if scope["method"] not in self.methods:
            raise HTTPException(status_code=405, headers={"Allow": ", ".join(sorted(self.methods))})
        await self.app(scope, receive, send)
