"""The tools of the chaos run; its workers load them through ``TOOLFAN_HANDLERS``.

Every tool with a side effect counts it under ``chaos:runs:<key>`` (one key per call) in
the ledger's Redis database, so the run can tell, after the fact, how many times each
call really ran: more than once is fine for an idempotent tool killed mid-call, and a
failure of exactly-once for the non-idempotent one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import redis

from handlers import RUN_AGAIN, ToolError, tool
from tests.chaos.keys import BUSY, RUNS_PREFIX


@cache
def _redis() -> redis.Redis:
    """One connection pool per worker process (cached after the fork, on first use)."""
    return redis.Redis.from_url(os.environ["TOOLFAN_REDIS_URL"], decode_responses=True)


@contextmanager
def _busy() -> Iterator[None]:
    """Mark this process busy while the tool runs: a kill then lands mid-call."""
    pid = os.getpid()
    _redis().sadd(BUSY, pid)
    try:
        yield
    finally:
        _redis().srem(BUSY, pid)


def _ran(key: str) -> int:
    """Record one run of the call ``key``; returns how many runs it has had so far."""
    return int(_redis().incr(RUNS_PREFIX + key))


@tool(timeout=5)
def chaos_count(key: str) -> int:
    """Idempotent and quick: counts its runs."""
    return _ran(key)


@tool(timeout=5)
def chaos_slow(key: str, ms: int) -> int:
    """Idempotent and slowish, so that kills land mid-call: counts, then sleeps."""
    with _busy():
        runs = _ran(key)
        time.sleep(ms / 1000)
        return runs


def _charged(args: Any) -> Any:
    """Reconcile hook: the counter says whether an interrupted charge already happened."""
    runs = int(_redis().get(RUNS_PREFIX + args.key) or 0)
    if runs == 0:
        return RUN_AGAIN
    return {"key": args.key, "cents": args.cents, "reconciled": True}


@tool(timeout=5, idempotent=False, reconcile=_charged)
def chaos_charge(key: str, cents: int, ms: int = 0) -> dict[str, Any]:
    """Not idempotent (it moves money): must never run twice for one call.

    It waits a little before and after its side effect, so a kill can land on either side.
    """
    with _busy():
        time.sleep(ms / 4000)
        _ran(key)
        time.sleep(3 * ms / 4000)
    return {"key": key, "cents": cents, "reconciled": False}


@tool(timeout=5)
def chaos_refuse(reason: str) -> None:
    """Fails on purpose with a message for the model; no side effect."""
    raise ToolError(reason)
