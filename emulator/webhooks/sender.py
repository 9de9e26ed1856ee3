"""One HTTP attempt: POST the bytes, time it, and say what came back (or why nothing did).

Deliveries use plain ``httpx`` with the environment ignored (``trust_env=False``): a proxy
configured for the developer's shell must not swallow pushes to a local receiver.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import httpx

#: Characters of a receiver's answer kept for the one-shot sends that report it.
ANSWER_PREVIEW = 2000
Headers = Mapping[str, str] | Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Attempted:
    """The result of one attempt.

    Attributes:
        sent_at: Unix time the request started; ``None`` if it was never sent.
        status: The HTTP status received, else ``None``.
        error: Why no status came back (refused, timeout, a fault), else ``None``.
        duration_ms: Wall time of the attempt; ``None`` if never sent.
        answer: The start of the receiver's answer body (empty when there was none).
    """

    sent_at: float | None
    status: int | None
    error: str | None
    duration_ms: float | None
    answer: str = ""

    @property
    def ok(self) -> bool:
        """A 2xx answer: the only thing that ends a delivery."""
        return self.status is not None and 200 <= self.status < 300


def not_sent(reason: str) -> Attempted:
    """An attempt a fault swallowed before it left the emulator."""
    return Attempted(sent_at=None, status=None, error=reason, duration_ms=None)


def new_client() -> httpx.Client:
    """A client for one delivery worker (or one one-shot send)."""
    return httpx.Client(trust_env=False, follow_redirects=False, verify=_tls())


@cache
def _tls() -> ssl.SSLContext:
    """The TLS settings of every delivery client, made once for the process.

    httpx builds them anew for each client it makes, loading the CA bundle: 18 ms of CPU a
    client. Delivery workers come and go with the load (each makes its client), so under
    bursts of pushes that took more of the emulator's CPU than the deliveries themselves,
    on the same cores as the fleet being measured. One context serves every thread.
    """
    return httpx.create_ssl_context(trust_env=False)


def post(
    client: httpx.Client, url: str, body: bytes, headers: Headers, timeout: float
) -> Attempted:
    """POST ``body`` to ``url``; every failure becomes an :class:`Attempted`, never raises."""
    sent_at, start = time.time(), time.monotonic()
    try:
        response = client.post(url, content=body, headers=list(_pairs(headers)), timeout=timeout)
    except httpx.TimeoutException:
        return _failed(sent_at, start, f"timeout after {timeout:g}s")
    except (httpx.HTTPError, OSError, ValueError) as error:  # refused, reset, bad URL
        return _failed(sent_at, start, f"{type(error).__name__}: {error}")
    return Attempted(
        sent_at=sent_at,
        status=response.status_code,
        error=None,
        duration_ms=_elapsed_ms(start),
        answer=response.text[:ANSWER_PREVIEW],
    )


def _pairs(headers: Headers) -> Sequence[tuple[str, str]]:
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def _elapsed_ms(start: float) -> float:
    return round((time.monotonic() - start) * 1000.0, 3)


def _failed(sent_at: float, start: float, error: str) -> Attempted:
    return Attempted(sent_at=sent_at, status=None, error=error, duration_ms=_elapsed_ms(start))
