"""HTTP for every remote API toolfan calls: retries, error kinds, and answers read safely.

Every request is retried on 429, 5xx and network errors with exponential backoff and full
jitter, honouring ``Retry-After``, bounded in attempts and in total time. Failures are
raised as :mod:`dispatcher.errors` types that tell retryable from final, and a failure
that is toolfan's configuration (a refused key, an unusable URL) names the variable to fix.
Answers are read with :mod:`handlers.jsonsafe`, so no depth, number or size crashes the
reader, and no message ever holds a credential.
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from dispatcher.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
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
from dispatcher.models import url_form
from dispatcher.retry import RetryPolicy, parse_retry_after
from handlers import jsonsafe

logger = logging.getLogger("dispatcher.client")

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
#: Seconds a pooled connection may idle before it is dropped: less than the 5 s after which
#: many servers close one (uvicorn's and Node's defaults). httpx keeps them 5 s as well, so
#: a request sent on a connection idle that long could meet the server closing it and fail
#: with a reset, costing a retry and its back-off.
KEEPALIVE_EXPIRY = 4.0
#: Connections an API client keeps while idle: one for each of the control worker's threads
#: (``TOOLFAN_CONTROL_THREADS``, 64), which deliver batches side by side. A connection
#: over this count is closed as soon as its answer is read, so the thread's next request
#: would open a new one, with its TCP and TLS handshakes.
KEEPALIVE_CONNECTIONS = 64
#: Connections an API client opens at most, above the kept ones: room for the runs poller's
#: readers beside the threads. A cap all the same: a gevent worker of a thousand greenlets
#: would otherwise open a socket to the API for each, and run out of file descriptors.
MAX_CONNECTIONS = 100


def connection_limits(threads: int = 0) -> httpx.Limits:
    """The pool of a client that ``threads`` threads share: a kept connection each, at least.

    Never less than the defaults, which serve the control worker's default threads; a
    thread finds a connection free up to the cap (httpx's own default cap is 100; toolfan's
    clients had 20, of which 10 kept).
    """
    keep = max(KEEPALIVE_CONNECTIONS, threads)
    return httpx.Limits(
        max_connections=max(MAX_CONNECTIONS, keep),
        max_keepalive_connections=keep,
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )


DEFAULT_LIMITS = connection_limits()
_FINAL_BY_STATUS: Mapping[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: BadRequestError,
}


class Transport:
    """One API's pooled connections, fixed headers and parameters, and retry rules.

    Args:
        base_url: The API root, already vetted.
        headers: Headers of every request (credentials included).
        params: Query parameters of every request (an ``api-version``).
        bearer: Makes a fresh bearer token per request, for expiring credentials.
        secrets: Credential values scrubbed from every message.
        key_setting: The variable holding the credential, named when it is refused.
        url_setting: The variable holding the endpoint, named when it is unusable.
        timeout: Per-request timeouts (httpx's value object).
        limits: Connection pool limits (httpx's value object).
        retry: Retry bounds.
        transport: An httpx transport to use instead of the network (tests, proxies).
        sleep: Called to wait between attempts; injectable for tests.
        rng: Source of jitter; seed it for reproducible delays.
        max_depth: Nesting read from an answer before parts become markers.
    """

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        params: Mapping[str, str] | None = None,
        bearer: Callable[[], str] | None = None,
        secrets: Sequence[str] = (),
        key_setting: str = "OPENAI_API_KEY",
        url_setting: str = "OPENAI_BASE_URL",
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        limits: httpx.Limits = DEFAULT_LIMITS,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        max_depth: int = 64,
    ) -> None:
        self.base_url = base_url
        self.params = list((params or {}).items())
        self.bearer = bearer
        self.secrets = tuple(s for s in secrets if s)
        self.key_setting = key_setting
        self.url_setting = url_setting
        self.retry = retry or RetryPolicy()
        self.max_depth = max_depth
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._http = httpx.Client(
            base_url=base_url,
            headers=dict(headers),
            timeout=timeout,
            limits=limits,
            transport=transport,
        )

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def request(
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
                shown_path(path),
                wait,
                attempt,
                self.retry.max_attempts,
                outcome.message,
            )
            self._sleep(wait)

    def json(self, response: httpx.Response, extra_depth: int = 0) -> Any:
        """The answer's JSON, read so that no depth, number or size can crash the reader."""
        try:
            return jsonsafe.loads(response.content, max_depth=self.max_depth + extra_depth)
        except ValueError as exc:
            raise self.unexpected(response, f"the answer is not JSON ({exc})") from exc

    def unexpected(self, response: httpx.Response, what: str) -> UnexpectedResponseError:
        """A 2xx answer that is not what the API documents."""
        return UnexpectedResponseError(
            self.scrub(f"{response.request.method} {response.request.url}: {what}"),
            status_code=response.status_code,
            request_id=response.headers.get("x-request-id"),
        )

    def scrub(self, text: str) -> str:
        """``text`` with every credential replaced."""
        for secret in self.secrets:
            text = text.replace(secret, "<api key>")
        return text

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
        where = f"{method} {self.base_url}{shown_path(path)}"
        try:
            query = [*self.params, *(params or [])]
            url = f"{path}?{query_string(query)}" if query else path
            response = self._http.request(
                method, url, content=content, headers=self._headers(headers)
            )
        except httpx.TimeoutException as exc:
            return APITimeoutError(f"{where}: no answer in time ({type(exc).__name__})")
        except httpx.UnsupportedProtocol as exc:
            raise self._setting(EndpointError(f"{where}: unusable base URL ({exc})")) from exc
        except httpx.InvalidURL as exc:  # the base URL was vetted: this request's own URL
            raise BadRequestError(f"{where}: the request URL cannot be sent ({exc})") from exc
        except httpx.TransportError as exc:
            endpoint = _endpoint_problem(exc)
            if endpoint is not None:
                unusable = EndpointError(f"{where}: {endpoint}; check {self.url_setting}")
                raise self._setting(unusable) from exc
            return APIConnectionError(f"{where}: connection failed ({type(exc).__name__}: {exc})")
        if response.is_success:
            return response
        error = self._error_from(response, where)
        if isinstance(error, RetryableAPIError):
            return error
        raise error

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str] | None:
        if self.bearer is None:
            return dict(extra) if extra else None
        try:
            token = self.bearer()
        except ConfigurationError:
            raise
        except Exception as exc:  # a credential library failing: a setting to look at
            message = f"could not get a token: {type(exc).__name__}: {exc}"
            raise self._setting(AuthenticationError(self.scrub(message))) from exc
        self.secrets = (*self.secrets, token) if token not in self.secrets else self.secrets
        return {**(extra or {}), "Authorization": f"Bearer {token}"}

    def _error_from(self, response: httpx.Response, where: str) -> APIError:
        status = response.status_code
        code, message, param = _error_fields(response)
        request_id = response.headers.get("x-request-id")
        text = self.scrub(f"{where}: HTTP {status}" + (f" {code}" if code else "") + f": {message}")
        if status == 401:
            text = (
                f"the API key was refused by {self.base_url} (HTTP 401"
                + (f" {code}" if code else "")
                + f"): check {self.key_setting} and {self.url_setting}"
            )
        if status == 429:
            retry_after = parse_retry_after(response.headers)
            return RateLimitError(text, retry_after=retry_after, code=code, request_id=request_id)
        if status >= 500 or status == 408:
            return ServerError(text, status_code=status, code=code, request_id=request_id)
        kind = _FINAL_BY_STATUS.get(status, FinalAPIError)
        error = kind(text, status_code=status, code=code, request_id=request_id, param=param)
        return self._setting(error) if isinstance(error, ConfigurationError) else error

    def _setting(self, error: ConfigurationError) -> ConfigurationError:
        """Name this API's own variable in a configuration error."""
        if isinstance(error, EndpointError):
            error.setting = self.url_setting
        else:
            error.setting = self.key_setting
        return error


def query_string(params: Sequence[tuple[str, str]]) -> str:
    """``params`` percent-encoded as a query string, lone surrogates as their bytes.

    A cursor is an id, which may hold anything; httpx would refuse to encode a lone
    surrogate and fail the pass.
    """
    return "&".join(f"{_quoted(key)}={_quoted(value)}" for key, value in params)


def _quoted(text: str) -> str:
    return url_form(text, safe="")


def shown_path(path: str) -> str:
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
