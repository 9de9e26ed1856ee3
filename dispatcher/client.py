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
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from types import TracebackType
from typing import Any, Literal

import httpx

from dispatcher.errors import AuthenticationError, BadRequestError, EndpointError
from dispatcher.listing import Glance, ListBudget, Listing
from dispatcher.models import BadSession, Session, addressable, parse_session, url_form
from dispatcher.retry import RetryPolicy
from dispatcher.transport import DEFAULT_LIMITS, DEFAULT_TIMEOUT, Transport, query_string

logger = logging.getLogger("dispatcher.client")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Re-exported: the request machinery is :mod:`dispatcher.transport`'s.
__all__ = ["DEFAULT_LIMITS", "DEFAULT_TIMEOUT", "AgentsClient", "query_string"]
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
        self.malformed_sessions = 0
        self.max_depth = max_depth
        self._transport = Transport(
            self.base_url,
            {
                "Authorization": f"Bearer {self._key}",
                "OpenAI-Beta": "agents=v1",
                "User-Agent": user_agent(),
                "Accept": "application/json",
            },
            secrets=(self._key,),
            timeout=timeout,
            limits=limits,
            retry=retry,
            transport=transport,
            sleep=sleep,
            rng=rng,
            max_depth=max_depth,
        )
        self.retry = self._transport.retry

    def __repr__(self) -> str:
        return f"AgentsClient(base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._transport.close()

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
        glance: Glance | None = None,
    ) -> Listing:
        """Every session matching the filters, across all pages, fetched lazily.

        ``order`` defaults to oldest first, so the longest-waiting sessions come first and
        sessions created during a long listing are still reached on its last pages. The
        listing yields a :class:`BadSession` for an entry it cannot read, and ends early,
        saying why in :attr:`Listing.cut`, when the API repeats a cursor or the budget
        (pages, seconds, a stop request) runs out: a hostile answer cannot hang a pass.
        A ``glance`` may stand in for the full read of the entries it recognizes.
        """
        if not 1 <= limit <= 100:
            raise ValueError("limit must be between 1 and 100")
        params: list[tuple[str, str]] = [("limit", str(limit)), ("order", order)]
        if agent_id is not None:
            params.append(("agent_id", agent_id))
        params += [(f"metadata[{k}]", v) for k, v in (metadata or {}).items()]
        return Listing(self._page, params, budget or ListBudget(), after, addressable, glance)

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
            elif isinstance(item, BadSession):  # no glance here: nothing else comes
                self.malformed_sessions += 1
                logger.warning(
                    "skipping malformed session %r from %s: %s",
                    item.id,
                    self.base_url,
                    item.problem,
                )

    def retrieve_session(self, session_id: str) -> Session:
        """The session's current state (``required_actions`` is the authority)."""
        response, _ = self._transport.request("GET", f"/agents/sessions/{path_segment(session_id)}")
        parsed = parse_session(self._json(response))
        if isinstance(parsed, BadSession):
            raise self._transport.unexpected(
                response, f"session {session_id!r} unreadable: {parsed.problem}"
            )
        return parsed

    def check_access(self) -> None:
        """One cheap authenticated request (a one-session page), to vet the settings.

        Raises:
            ConfigurationError: the key, the URL or the certificate is wrong.
            NotFoundError: the base URL serves no sessions endpoint.
            RetryableAPIError: the API did not answer well enough to tell.
        """
        self._transport.request("GET", "/agents/sessions", params=[("limit", "1")])

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
        response, attempts = self._transport.request(
            "POST",
            f"/agents/sessions/{path_segment(session_id)}/events",
            content=body,
            headers={"Idempotency-Key": idempotency_key, "Content-Type": "application/json"},
        )
        return Accepted(response.status_code, attempts, response.headers.get("x-request-id"))

    # --- pages -------------------------------------------------------------------------------

    def _page(self, params: list[tuple[str, str]]) -> tuple[list[Any], bool]:
        """One page's raw entries and its ``has_more``; an unreadable page raises."""
        response, _ = self._transport.request("GET", "/agents/sessions", params=params)
        body = self._json(response)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise self._transport.unexpected(response, "session list unreadable: no 'data' array")
        return data, body.get("has_more") is True

    def _json(self, response: httpx.Response) -> Any:
        """The answer's JSON, read so that no depth, number or size can crash the reader."""
        return self._transport.json(response, PAGE_DEPTH)


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


def events_body(events: Sequence[Mapping[str, Any]]) -> bytes:
    """The JSON body of one events batch, ASCII-escaped so any id survives the trip."""
    return json.dumps({"events": [dict(e) for e in events]}, separators=(",", ":")).encode()
