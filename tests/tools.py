"""Tools used by the tests; the worker loads them through TOOLFAN_HANDLERS.

Side effects are counted in Redis so that a test in another process can see exactly how
many times a function really ran.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import redis
from celery import shared_task

from handlers import RUN_AGAIN, CallContext, ToolError, call_context, tool
from tests import policies


def _redis() -> redis.Redis:
    """Where side effects are counted: the ledger's Redis unless a test keeps them apart.

    A test that restarts the ledger's Redis counts elsewhere (``TEST_COUNTER_REDIS_URL``),
    so that a tool failing on its own dependency during the outage is not mistaken for a
    call toolfan lost.
    """
    url = os.environ.get("TEST_COUNTER_REDIS_URL") or os.environ["TOOLFAN_REDIS_URL"]
    return redis.Redis.from_url(url, decode_responses=True)


@tool(timeout=5)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(timeout=5)
def boom() -> None:
    """Always fails with an unexpected exception."""
    raise RuntimeError("kaboom")


@tool(timeout=5)
def refuse(reason: str) -> None:
    """Fails on purpose with a message for the model."""
    raise ToolError(reason)


@tool(timeout=0.5)
def sleepy(seconds: float) -> str:
    """Sleeps longer than its timeout allows."""
    time.sleep(seconds)
    return "woke up"


@tool(timeout=5)
def count(key: str) -> int:
    """Counts its runs under ``key``: the side effect the tests count."""
    return int(_redis().incr(f"test:runs:{key}"))


def _note_start(key: str) -> None:
    client = _redis()
    client.incr(f"test:runs:{key}")
    client.set(f"test:pid:{key}", os.getpid())


@tool(idempotent=False, timeout=30)
def charge(key: str, seconds: float = 0.0) -> str:
    """A non-idempotent tool without a reconcile hook."""
    _note_start(key)
    time.sleep(seconds)
    return "charged"


def _charged_already(args: Any) -> Any:
    runs = int(_redis().get(f"test:runs:{args.key}") or 0)
    return {"reconciled": True, "runs": runs} if runs else RUN_AGAIN


@tool(idempotent=False, timeout=30, reconcile=_charged_already)
def charge_reconciled(key: str, seconds: float = 0.0) -> str:
    """A non-idempotent tool whose reconcile hook checks for an earlier run."""
    _note_start(key)
    time.sleep(seconds)
    return "charged"


@tool(timeout=5)
def crash(key: str) -> str:
    """Kills its worker process every time: a poison call."""
    _redis().incr(f"test:runs:{key}")
    os._exit(1)


@tool(timeout=30)
def slow_count(key: str, seconds: float = 0.0) -> int:
    """An idempotent tool that takes its time: killed mid-call, it simply runs again."""
    _note_start(key)
    time.sleep(seconds)
    return int(_redis().get(f"test:runs:{key}") or 0)


@tool(timeout=1, queue="fn.unserved")
def unserved(seconds: float = 0.0) -> str:
    """Its queue has no worker in the tests: its calls wait until their deadline.

    Only the gevent test's worker consumes it; ``seconds`` keeps its calls in flight at once.
    """
    time.sleep(seconds)
    return "never"


@shared_task(name="tests.collect")
def collect(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chord callback for the tests: hands the header results back unchanged."""
    return results


@tool(timeout=5)
def echo(text: str) -> str:
    """Returns its argument: each call's output names the call, so cross-talk shows."""
    return text


@tool(timeout=5)
def emit(kind: str, size: int = 0, text: str = "") -> Any:
    """Returns (or raises) a hostile value of the given ``kind``, starting with ``text``."""
    big = "x" * size
    values: dict[str, Any] = {
        "surrogate": f"{text}\ud800-\ud83d\ude00",
        "nul": f"{text}\x00end",
        "empty_part": [{"type": "input_text", "text": ""}, {"type": "input_text", "text": text}],
        "only_empty_parts": [{"type": "input_text", "text": ""}],
        "image": [
            {"type": "input_text", "text": text},
            {"type": "input_image", "image_url": "data:," + big},
        ],
        "parts": [{"type": "input_text", "text": text}] * size,
        "text": text + big,
    }
    if kind == "tool_error":
        raise ToolError(text + big)
    if kind == "exception":
        raise ValueError(text + big)
    if kind == "deep":
        value: list[Any] = []
        for _ in range(size):
            value = [value]
        return value
    return values[kind]


def _progress(key: str) -> None:
    _redis().incr(f"test:spin:{key}")


@tool(timeout=1)
def spin(key: str) -> str:
    """Loops until stopped, counting its progress: a runaway sync tool."""
    last = 0.0
    while True:
        if time.monotonic() - last > 0.05:
            _progress(key)
            last = time.monotonic()


@tool(timeout=1)
def stubborn(key: str) -> str:
    """A runaway that swallows even the exception meant to stop it."""
    last = 0.0
    while True:
        try:
            while True:
                if time.monotonic() - last > 0.05:
                    _progress(key)
                    last = time.monotonic()
        except BaseException:
            continue


@tool(timeout=5)
def thread_name() -> str:
    """The name of the thread the call runs on."""
    return threading.current_thread().name


@tool(timeout=5)
def pid() -> int:
    """The pid of the process running the call."""
    return os.getpid()


_HOARD: list[bytes] = []


@tool(timeout=10, queue="fn.private")
def hoard(megabytes: int) -> int:
    """Keeps ``megabytes`` more memory for good: a leaking tool (on a test's own worker)."""
    _HOARD.append(os.urandom(1024) * (megabytes * 1024))
    return os.getpid()


@tool(timeout=25, queue="fn.private")
def private_slow(key: str, seconds: float = 0.0) -> int:
    """An idempotent tool on a test's own workers, marking where and how often it ran."""
    _note_start(key)
    time.sleep(seconds)
    return int(_redis().get(f"test:runs:{key}") or 0)


@tool(timeout=45, queue="fn.private")
def private_long(key: str, seconds: float = 0.0) -> int:
    """``private_slow`` with room for a call longer than a 25 s tool may take."""
    _note_start(key)
    time.sleep(seconds)
    return int(_redis().get(f"test:runs:{key}") or 0)


@tool(idempotent=False, timeout=25, queue="fn.private", reconcile=_charged_already)
def private_charge(key: str, seconds: float = 0.0) -> str:
    """A non-idempotent tool on a test's own workers, with a reconcile hook."""
    _note_start(key)
    time.sleep(seconds)
    return "charged"


@tool(timeout=10, queue="fn.inline")
def nap(key: str, seconds: float = 0.5) -> str:
    """Sleeps, then counts its run under ``key``: many run at once on a threads worker."""
    time.sleep(seconds)
    return f"{key}:{_redis().incr(f'test:runs:{key}')}"


def _seen(ctx: CallContext) -> dict[str, Any]:
    """What a context told its tool, as JSON."""
    return {
        "source": ctx.source,
        "batch_id": ctx.batch_id,
        "turn_id": ctx.turn_id,
        "call_id": ctx.call_id,
        "function": ctx.function,
        "agent_id": ctx.agent_id,
        "metadata": dict(ctx.metadata),
        "attempt": ctx.attempt,
        "deadline": ctx.deadline,
        "idempotency_key": ctx.idempotency_key,
        "ids": dict(ctx.ids),
        "current_is_given": call_context() is ctx,
    }


@tool(timeout=10)
def whoami(key: str, ctx: CallContext) -> str:
    """Records the context it was given under ``key`` (a list, one entry per run)."""
    seen = _seen(ctx)
    _redis().rpush(f"test:ctx:{key}", json.dumps(seen))
    return f"{ctx.source}:{ctx.call_id}"


@tool(timeout=10)
def whoami_killed(key: str, ctx: CallContext) -> str:
    """``whoami``, whose first delivery kills its own worker process (SIGKILL)."""
    _redis().rpush(f"test:ctx:{key}", json.dumps(_seen(ctx)))
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"attempt {ctx.attempt}"


@tool(timeout=10, authorize=policies.deny_deletes)
def delete_record(key: str) -> str:
    """Deletes (counts) a record; its policy wants an admin session."""
    return f"deleted {_redis().incr(f'test:runs:{key}')}"


@tool(timeout=10, requires_approval=True)
def erase(key: str) -> str:
    """Erases (counts) a record: every call waits for a person's approval."""
    return f"erased {_redis().incr(f'test:runs:{key}')}"


@tool(timeout=10, authorize=policies.approve_large)
def transfer(key: str, amount: int) -> str:
    """Moves money (counts): above 100, its policy wants a person's approval."""
    return f"moved {amount} ({_redis().incr(f'test:runs:{key}')})"


@tool(timeout=10, queue="fn.private", requires_approval=True)
def private_erase(key: str) -> str:
    """``erase`` on a test's own workers (a short approval timeout)."""
    return f"erased {_redis().incr(f'test:runs:{key}')}"
