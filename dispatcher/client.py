"""A small synchronous client for the Agents API sessions endpoints, built on httpx.

It exists (instead of the official SDK) so that retries, idempotency and error kinds are
toolfan's own: every request is retried on 429, 5xx and network errors with exponential
backoff and full jitter, honouring ``Retry-After``, bounded in attempts and in total time,
and a batch of results keeps its ``Idempotency-Key`` on every retry, so a 202 lost on the
way back is answered by the API's replay instead of a second application. Failures are
raised as :mod:`dispatcher.errors` types that tell retryable from final.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from dispatcher.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    FinalAPIError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RetriesExhausted,
    RetryableAPIError,
    ServerError,
    UnexpectedResponseError,
)
from dispatcher.models import Session, SessionPage
from dispatcher.retry import RetryPolicy, parse_retry_after

logger = logging.getLogger("dispatcher.client")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
DEFAULT_LIMITS = httpx.Limits(max_connections=20, max_keepalive_connections=10)
_FINAL_BY_STATUS: Mapping[int, type[FinalAPIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: BadRequestError,
}


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

    Raises:
        AuthenticationError: No API key is configured.
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
    ) -> None:
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        if not key.strip():
            raise AuthenticationError(
                f"no API key for {self.base_url}: set OPENAI_API_KEY or pass api_key"
            )
        self._key = key.strip()
        self.retry = retry or RetryPolicy()
        self.malformed_sessions = 0
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

    def iter_sessions(
        self,
        agent_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        limit: int = 100,
        *,
        order: Literal["asc", "desc"] = "asc",
    ) -> Iterator[Session]:
        """Every session matching the filters, across all pages, fetched lazily.

        ``order`` defaults to oldest first, so the longest-waiting sessions come first and
        sessions created during a long listing are still reached on its last pages. A
        malformed session is logged, counted in :attr:`malformed_sessions` and skipped.
        """
        if not 1 <= limit <= 100:
            raise ValueError("limit must be between 1 and 100")
        params: list[tuple[str, str]] = [("limit", str(limit)), ("order", order)]
        if agent_id is not None:
            params.append(("agent_id", agent_id))
        params += [(f"metadata[{k}]", v) for k, v in (metadata or {}).items()]
        after: str | None = None
        while True:
            page = self._page(params + ([("after", after)] if after else []))
            yield from self._sessions_of(page)
            if not page.has_more or not page.data:
                return
            after = self._last_id(page)

    def retrieve_session(self, session_id: str) -> Session:
        """The session's current state (``required_actions`` is the authority)."""
        response, _ = self._request("GET", f"/agents/sessions/{_segment(session_id)}")
        try:
            return Session.model_validate(self._json(response))
        except ValidationError as exc:
            raise self._unexpected(response, f"session {session_id!r} unreadable: {exc}") from exc

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
        if not idempotency_key:
            raise ValueError("an idempotency key is required")
        response, attempts = self._request(
            "POST",
            f"/agents/sessions/{_segment(session_id)}/events",
            json={"events": [dict(e) for e in events]},
            headers={"Idempotency-Key": idempotency_key},
        )
        return Accepted(response.status_code, attempts, response.headers.get("x-request-id"))

    # --- pages -------------------------------------------------------------------------------

    def _page(self, params: list[tuple[str, str]]) -> SessionPage:
        response, _ = self._request("GET", "/agents/sessions", params=params)
        try:
            return SessionPage.model_validate(self._json(response))
        except ValidationError as exc:
            raise self._unexpected(response, f"session list unreadable: {exc}") from exc

    def _sessions_of(self, page: SessionPage) -> Iterator[Session]:
        for raw in page.data:
            try:
                yield Session.model_validate(raw)
            except ValidationError as exc:
                self.malformed_sessions += 1
                ident = raw.get("id") if isinstance(raw, dict) else None
                logger.warning(
                    "skipping malformed session %r from %s: %s", ident, self.base_url, exc
                )

    def _last_id(self, page: SessionPage) -> str:
        last = page.data[-1]
        ident = last.get("id") if isinstance(last, dict) else None
        if not isinstance(ident, str) or not ident:
            raise UnexpectedResponseError(
                f"the last session of a page from {self.base_url} has no id"
            )
        return ident

    # --- transport and retries ---------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: list[tuple[str, str]] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[httpx.Response, int]:
        """Send with retries; returns the successful response and the attempts it took."""
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            outcome = self._attempt(method, path, params=params, json=json, headers=headers)
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
        json: Any,
        headers: Mapping[str, str] | None,
    ) -> httpx.Response | RetryableAPIError:
        """One request: the response on success, a retryable error, or raise a final one."""
        where = f"{method} {self.base_url}{path}"
        try:
            query = httpx.QueryParams(tuple(params)) if params else None
            response = self._http.request(method, path, params=query, json=json, headers=headers)
        except httpx.TimeoutException as exc:
            return APITimeoutError(f"{where}: no answer in time ({type(exc).__name__})")
        except httpx.UnsupportedProtocol as exc:
            raise FinalAPIError(f"{where}: unusable base URL ({exc})") from exc
        except httpx.TransportError as exc:
            return APIConnectionError(f"{where}: connection failed ({type(exc).__name__}: {exc})")
        if response.is_success:
            return response
        error = self._error_from(response, where)
        if isinstance(error, RetryableAPIError):
            return error
        raise error

    def _error_from(self, response: httpx.Response, where: str) -> APIError:
        status = response.status_code
        code, message = _error_fields(response)
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
        return kind(text, status_code=status, code=code, request_id=request_id)

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise self._unexpected(response, "the answer is not JSON") from exc

    def _unexpected(self, response: httpx.Response, what: str) -> UnexpectedResponseError:
        return UnexpectedResponseError(
            self._scrub(f"{response.request.method} {response.request.url}: {what}"),
            status_code=response.status_code,
            request_id=response.headers.get("x-request-id"),
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "<api key>")


def _segment(value: str) -> str:
    if not value:
        raise ValueError("a session id is required")
    return quote(value, safe="")


def _error_fields(response: httpx.Response) -> tuple[str | None, str]:
    """The ``code`` and ``message`` of an OpenAI error body, tolerating any body."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if not isinstance(error, dict):
        return None, (response.text[:200] or response.reason_phrase)
    code = error.get("code")
    return (str(code) if code else None), str(error.get("message") or response.reason_phrase)
