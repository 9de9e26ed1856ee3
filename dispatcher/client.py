"""A small synchronous client for the Agents API sessions endpoints, built on httpx.

It exists (instead of the official SDK) so that retries, idempotency and error kinds are
toolfan's own: every request is retried on 429, 5xx and network errors with exponential
backoff and full jitter, honouring ``Retry-After``, bounded in attempts and in total time,
and a batch of results keeps its ``Idempotency-Key`` on every retry, so a 202 lost on the
way back is answered by the API's replay instead of a second application. Failures are
raised as :mod:`dispatcher.errors` types that tell retryable from final.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from types import TracebackType
from typing import Any, Literal

import httpx

from dispatcher.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    EndpointError,
    FinalAPIError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RetriesExhausted,
    RetryableAPIError,
    ServerError,
    UnexpectedResponseError,
)
from dispatcher.listing import ListBudget, Listing
from dispatcher.models import BadSession, Session, addressable, parse_session, url_form
from dispatcher.retry import RetryPolicy, parse_retry_after
from handlers import jsonsafe

logger = logging.getLogger("dispatcher.client")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
DEFAULT_LIMITS = httpx.Limits(max_connections=20, max_keepalive_connections=10)
_FINAL_BY_STATUS: Mapping[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: BadRequestError,
}
#: Levels of a page around a call's arguments (page, data, session, actions, action), so
#: arguments as deep as the limit arrive whole and deeper ones as a marker the poller reads.
PAGE_DEPTH = 8


def user_agent() -> str:
    """``toolfan/<version>``, so the API's operators can tell toolfan's traffic apart."""
    try:
        version = importlib_metadata.version("toolfan")
    except importlib_metadata.PackageNotFoundError:
        version = "0+unknown"
    return f"toolfan/{version}"


@dataclass(frozen=True)
class Accepted:
    """The API's 202 for a batch of events: accepted, not yet durably applied."""

    status_code: int
    attempts: int
    request_id: str | None


class AgentsClient:
    """Sessions endpoints of the Agents API, with pooled connections and retries.

    Args:
        api_key: Bearer token; defaults to ``OPENAI_API_KEY``.
        base_url: API root; defaults to ``OPENAI_BASE_URL``, else the public API.
        timeout: Per-request timeouts (httpx's value object).
        limits: Connection pool limits (httpx's value object).
        retry: Retry bounds.
        transport: An httpx transport to use instead of the network (tests, proxies).
        sleep: Called to wait between attempts; injectable for tests.
        rng: Source of jitter; seed it for reproducible delays.
        max_depth: Nesting allowed in a call's arguments; deeper parts of an answer are
            read as :class:`handlers.jsonsafe.Unreadable` markers instead of crashing.

    Raises:
        AuthenticationError: No API key is configured.
        EndpointError: The base URL is not an http(s) URL with a host.
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        limits: httpx.Limits = DEFAULT_LIMITS,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        max_depth: int = 64,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.base_url = check_base_url(
            base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        )
        if not key.strip():
            raise AuthenticationError(
                f"no API key for {self.base_url}: set OPENAI_API_KEY or pass api_key"
            )
        self._key = key.strip()
        self.retry = retry or RetryPolicy()
        self.malformed_sessions = 0
        self.max_depth = max_depth
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "Authorization": f"Bearer {self._key}",
                "OpenAI-Beta": "agents=v1",
                "User-Agent": user_agent(),
                "Accept": "application/json",
            },
            timeout=timeout,
            limits=limits,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"AgentsClient(base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def __enter__(self) -> AgentsClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- endpoints ---------------------------------------------------------------------------

    def list_sessions(
        self,
        agent_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        limit: int = 100,
        *,
        order: Literal["asc", "desc"] = "asc",
        after: str | None = None,
        budget: ListBudget | None = None,
    ) -> Listing:
        """Every session matching the filters, across all pages, fetched lazily.

        ``order`` defaults to oldest first, so the longest-waiting sessions come first and
        sessions created during a long listing are still reached on its last pages. The
        listing yields a :class:`BadSession` for an entry it cannot read, and ends early,
        saying why in :attr:`Listing.cut`, when the API repeats a cursor or the budget
        (pages, seconds, a stop request) runs out: a hostile answer cannot hang a pass.
        """
        if not 1 <= limit <= 100:
            raise ValueError("limit must be between 1 and 100")
        params: list[tuple[str, str]] = [("limit", str(limit)), ("order", order)]
        if agent_id is not None:
            params.append(("agent_id", agent_id))
        params += [(f"metadata[{k}]", v) for k, v in (metadata or {}).items()]
        return Listing(self._page, params, budget or ListBudget(), after, addressable)

    def iter_sessions(
        self,
        agent_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        limit: int = 100,
        *,
        order: Literal["asc", "desc"] = "asc",
    ) -> Iterator[Session]:
        """The readable sessions of :meth:`list_sessions`; others are logged and counted."""
        for item in self.list_sessions(agent_id, metadata, limit, order=order):
            if isinstance(item, Session):
                yield item
            else:
                self.malformed_sessions += 1
                logger.warning(
                    "skipping malformed session %r from %s: %s",
                    item.id,
                    self.base_url,
                    item.problem,
                )

    def retrieve_session(self, session_id: str) -> Session:
        """The session's current state (``required_actions`` is the authority)."""
        response, _ = self._request("GET", f"/agents/sessions/{path_segment(session_id)}")
        parsed = parse_session(self._json(response))
        if isinstance(parsed, BadSession):
            raise self._unexpected(response, f"session {session_id!r} unreadable: {parsed.problem}")
        return parsed

    def check_access(self) -> None:
        """One cheap authenticated request (a one-session page), to vet the settings.

        Raises:
            ConfigurationError: the key, the URL or the certificate is wrong.
            NotFoundError: the base URL serves no sessions endpoint.
            RetryableAPIError: the API did not answer well enough to tell.
        """
        self._request("GET", "/agents/sessions", params=[("limit", "1")])

    def submit_events(
        self, session_id: str, events: Sequence[Mapping[str, Any]], idempotency_key: str
    ) -> Accepted:
        """Send one batch of input events; every retry carries the same idempotency key.

        Raises:
            ConflictError: An answered call is not pending (already answered, or never).
            BadRequestError: The API rejected the events as malformed.
            RetriesExhausted: Every attempt failed transiently; resubmit later, same key.
        """
        if not events:
            raise ValueError("events must not be empty")
        return self.submit_body(session_id, events_body(events), idempotency_key)

    def submit_body(self, session_id: str, body: bytes, idempotency_key: str) -> Accepted:
        """Send an already encoded events body (see :func:`events_body`), same retries."""
        if not idempotency_key:
            raise ValueError("an idempotency key is required")
        response, attempts = self._request(
            "POST",
            f"/agents/sessions/{path_segment(session_id)}/events",
            content=body,
            headers={"Idempotency-Key": idempotency_key, "Content-Type": "application/json"},
        )
        return Accepted(response.status_code, attempts, response.headers.get("x-request-id"))

    # --- pages -------------------------------------------------------------------------------

    def _page(self, params: list[tuple[str, str]]) -> tuple[list[Any], bool]:
        """One page's raw entries and its ``has_more``; an unreadable page raises."""
        response, _ = self._request("GET", "/agents/sessions", params=params)
        body = self._json(response)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise self._unexpected(response, "session list unreadable: no 'data' array")
        return data, body.get("has_more") is True

    # --- transport and retries ---------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: list[tuple[str, str]] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[httpx.Response, int]:
        """Send with retries; returns the successful response and the attempts it took."""
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            outcome = self._attempt(method, path, params=params, content=content, headers=headers)
            if isinstance(outcome, httpx.Response):
                return outcome, attempt
            wait = self._wait_before_retry(outcome, attempt, start)
            if wait is None:
                raise RetriesExhausted(
                    f"{method} {self.base_url}{path} failed {attempt} time(s); last: "
                    f"{outcome.message}",
                    last_error=outcome,
                    attempts=attempt,
                ) from outcome
            logger.warning(
                "retrying %s %s in %.2fs after attempt %d of %d failed: %s",
                method,
                path,
                wait,
                attempt,
                self.retry.max_attempts,
                outcome.message,
            )
            self._sleep(wait)

    def _wait_before_retry(
        self, error: RetryableAPIError, attempt: int, start: float
    ) -> float | None:
        """Seconds to wait before the next attempt, or ``None`` when the budget is spent."""
        if attempt >= self.retry.max_attempts:
            return None
        wait = self.retry.backoff(attempt, self._rng)
        if isinstance(error, RateLimitError) and error.retry_after is not None:
            wait = max(wait, error.retry_after)
        if time.monotonic() - start + wait > self.retry.max_elapsed:
            return None
        return wait

    def _attempt(
        self,
        method: str,
        path: str,
        *,
        params: list[tuple[str, str]] | None,
        content: bytes | None,
        headers: Mapping[str, str] | None,
    ) -> httpx.Response | RetryableAPIError:
        """One request: the response on success, a retryable error, or raise a final one."""
        where = f"{method} {self.base_url}{_shown(path)}"
        try:
            url = f"{path}?{query_string(params)}" if params else path
            response = self._http.request(method, url, content=content, headers=headers)
        except httpx.TimeoutException as exc:
            return APITimeoutError(f"{where}: no answer in time ({type(exc).__name__})")
        except httpx.UnsupportedProtocol as exc:
            raise EndpointError(f"{where}: unusable base URL ({exc})") from exc
        except httpx.InvalidURL as exc:  # the base URL was vetted: this request's own URL
            raise BadRequestError(f"{where}: the request URL cannot be sent ({exc})") from exc
        except httpx.TransportError as exc:
            endpoint = _endpoint_problem(exc)
            if endpoint is not None:
                raise EndpointError(f"{where}: {endpoint}; check OPENAI_BASE_URL") from exc
            return APIConnectionError(f"{where}: connection failed ({type(exc).__name__}: {exc})")
        if response.is_success:
            return response
        error = self._error_from(response, where)
        if isinstance(error, RetryableAPIError):
            return error
        raise error

    def _error_from(self, response: httpx.Response, where: str) -> APIError:
        status = response.status_code
        code, message, param = _error_fields(response)
        request_id = response.headers.get("x-request-id")
        text = self._scrub(
            f"{where}: HTTP {status}" + (f" {code}" if code else "") + f": {message}"
        )
        if status == 401:
            text = (
                f"the API key was refused by {self.base_url} (HTTP 401"
                + (f" {code}" if code else "")
                + "): check OPENAI_API_KEY and OPENAI_BASE_URL"
            )
        if status == 429:
            retry_after = parse_retry_after(response.headers)
            return RateLimitError(text, retry_after=retry_after, code=code, request_id=request_id)
        if status >= 500 or status == 408:
            return ServerError(text, status_code=status, code=code, request_id=request_id)
        kind = _FINAL_BY_STATUS.get(status, FinalAPIError)
        return kind(text, status_code=status, code=code, request_id=request_id, param=param)

    def _json(self, response: httpx.Response) -> Any:
        """The answer's JSON, read so that no depth, number or size can crash the reader."""
        try:
            return jsonsafe.loads(response.content, max_depth=self.max_depth + PAGE_DEPTH)
        except ValueError as exc:
            raise self._unexpected(response, f"the answer is not JSON ({exc})") from exc

    def _unexpected(self, response: httpx.Response, what: str) -> UnexpectedResponseError:
        return UnexpectedResponseError(
            self._scrub(f"{response.request.method} {response.request.url}: {what}"),
            status_code=response.status_code,
            request_id=response.headers.get("x-request-id"),
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "<api key>")


def check_base_url(url: str) -> str:
    """``url`` without its trailing slash, if it is an http(s) URL with a host.

    Raises:
        EndpointError: naming ``OPENAI_BASE_URL`` and what is wrong with the value.
    """
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise EndpointError(f"OPENAI_BASE_URL={url!r} is not a URL ({exc})") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise EndpointError(
            f"OPENAI_BASE_URL={url!r} is not an http(s) URL with a host, "
            "e.g. https://api.openai.com/v1"
        )
    return str(parsed).rstrip("/")


def path_segment(value: str) -> str:
    """``value`` percent-encoded for one URL path segment, as the official SDK encodes it.

    Lone surrogates are sent as their ``surrogatepass`` bytes rather than failing.

    Raises:
        BadRequestError: the id is empty, ``.`` or ``..`` (a client would send the request
            to another resource), or too long for a URL: final for its batch.
    """
    if not addressable(value):
        raise BadRequestError(f"the id {value[:100]!r} cannot be sent in a URL path")
    return url_form(value)


def query_string(params: Sequence[tuple[str, str]]) -> str:
    """``params`` percent-encoded as a query string, lone surrogates as their bytes.

    The ``after`` cursor is a session id, which may hold anything; httpx would refuse to
    encode a lone surrogate and fail the pass.
    """
    return "&".join(f"{_quoted(key)}={_quoted(value)}" for key, value in params)


def _quoted(text: str) -> str:
    return url_form(text, safe="")


def events_body(events: Sequence[Mapping[str, Any]]) -> bytes:
    """The JSON body of one events batch, ASCII-escaped so any id survives the trip."""
    return json.dumps({"events": [dict(e) for e in events]}, separators=(",", ":")).encode()


def _shown(path: str) -> str:
    """A request path cut for messages: an id may be 10,000 characters long."""
    return path if len(path) <= 300 else f"{path[:300]}..."


def _endpoint_problem(exc: httpx.TransportError) -> str | None:
    """Why a transport failure is the base URL's fault (DNS, TLS), or None if it may pass."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return f"the host is unknown to DNS ({seen})"
        if isinstance(seen, ssl.SSLError):
            return f"TLS failed ({seen})"
        seen = seen.__cause__ or seen.__context__
    return None


def _error_fields(response: httpx.Response) -> tuple[str | None, str, str | None]:
    """The ``code``, ``message`` and ``param`` of an OpenAI error body, tolerating any body."""
    try:
        error = jsonsafe.loads(response.content, max_depth=8).get("error")
    except (ValueError, AttributeError):
        error = None
    if not isinstance(error, dict):
        return None, (response.text[:200] or response.reason_phrase), None
    code, param = error.get("code"), error.get("param")
    message = str(error.get("message") or response.reason_phrase)[:2000]
    return (str(code) if code else None), message, (param if isinstance(param, str) else None)
