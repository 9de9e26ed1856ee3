"""Blocking reads of a one-element Redis list: how callers wait for an answer.

A waiter moves the list onto itself (``BLMOVE key key``): it blocks until the list has
its element, gets it, and leaves it in place for every other waiter, then and later. The
wait is cut into reads shorter than the client's socket timeout (redis-py's default is 5
seconds), so a long wait neither trips that timeout nor needs it switched off, which would
leave a waiter hanging on a Redis that vanished.
"""

from __future__ import annotations

import time
from typing import Any

import redis
import redis.asyncio


def _slice(pool: Any) -> float | None:
    """Seconds one blocking read may last under the pool's socket timeout (None: any)."""
    kwargs = getattr(pool, "connection_kwargs", {})
    timeout = kwargs.get("socket_timeout", kwargs.get("orig_socket_timeout"))
    return None if timeout is None else max(0.1, float(timeout) * 0.8)


def _seconds(left: float, limit: float | None) -> float:
    """A read's timeout: fractional seconds (Redis takes them), never 0 (which blocks forever)."""
    wait = left if limit is None else min(left, limit)
    return max(0.001, round(wait, 3))


def wait_element(client: redis.Redis, key: str, seconds: float) -> str | None:
    """The list's element once it has one, or None after ``seconds``."""
    limit = _slice(client.connection_pool)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        raw = client.blmove(key, key, _seconds(left, limit), "LEFT", "RIGHT")  # type: ignore[arg-type]
        if raw is not None:
            return str(raw)
    return None


async def await_element(client: redis.asyncio.Redis, key: str, seconds: float) -> str | None:
    """:func:`wait_element` on an event loop."""
    limit = _slice(client.connection_pool)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        raw = await client.blmove(key, key, _seconds(left, limit), "LEFT", "RIGHT")  # type: ignore[arg-type]
        if raw is not None:
            return str(raw)
    return None
