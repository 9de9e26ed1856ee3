"""Who a call serves: :class:`CallContext`, for tools that scope their work to the caller.

A tool gets its arguments, which the model wrote, and nothing the model could forge about
whose call it is. A parameter annotated ``CallContext`` receives that instead, and never
appears in the tool's schema::

    @tool
    def refund(order_id: str, ctx: CallContext) -> dict:
        customer = ctx.metadata.get("customer_id")       # the session's, not the model's
        return payments.refund(order_id, idempotency_key=ctx.idempotency_key)

Code that cannot take a parameter (an SDK ``function_tool``, a helper deep in the tool)
reads the same object with :func:`call_context` while the call runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

T = TypeVar("T")

#: The prefix of every idempotency key, so a key in another system's log says who sent it.
KEY_PREFIX = "toolfan-call-"

_EMPTY: Mapping[str, str] = MappingProxyType({})


def idempotency_key(source: str, batch_id: str, turn_id: str, call_id: str) -> str:
    """The key of one call: the same on every delivery, retry and dispatch of that call.

    It is a digest of the call's identity (source, batch, turn, call), so any id (of any
    size or character) makes a key of 77 plain characters that an API accepts.
    """
    identity = json.dumps([source, batch_id, turn_id, call_id], ensure_ascii=True)
    return KEY_PREFIX + hashlib.sha256(identity.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CallContext:
    """One call's identity and circumstances, as toolfan knows them (never the model).

    Attributes:
        source: Where the call came from: ``agents``, ``assistants``, ``inline``...
        batch_id: The batch it is answered in (a session id; a run's thread and run).
        turn_id: Its turn (sessions) or phase (runs); empty where the source has none.
        call_id: The call's id within its batch.
        function: The function called.
        agent_id: The agent of the session or run, where the source knows it.
        metadata: The session's or run's metadata (read-only; empty when it has none).
        attempt: Which delivery of the call this is: 1, or more after a worker died.
        deadline: Epoch seconds by which the batch must be answered, where it has one.
        idempotency_key: Stable for this call across redeliveries, retries and
            re-dispatches: pass it to the API the tool calls (see :func:`idempotency_key`).
        ids: The batch's own ids by name (``session_id``; ``thread_id`` and ``run_id``).
    """

    source: str
    batch_id: str
    turn_id: str
    call_id: str
    function: str
    agent_id: str | None = None
    metadata: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    attempt: int = 1
    deadline: float | None = None
    idempotency_key: str = ""
    ids: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def session_id(self) -> str | None:
        """The Agents session's id, for a session's call."""
        return self.ids.get("session_id")

    @property
    def thread_id(self) -> str | None:
        """The thread's id, for a run's call."""
        return self.ids.get("thread_id")

    @property
    def run_id(self) -> str | None:
        """The run's id, for a run's call."""
        return self.ids.get("run_id")


def frozen(pairs: Mapping[str, str] | None) -> Mapping[str, str]:
    """A read-only copy of ``pairs`` (a tool cannot change what the next call sees)."""
    return MappingProxyType(dict(pairs)) if pairs else _EMPTY


_CURRENT: ContextVar[CallContext | None] = ContextVar("toolfan_call_context", default=None)


def call_context() -> CallContext:
    """The context of the call running in this thread (or task).

    Raises:
        LookupError: no toolfan call is running here.
    """
    current = _CURRENT.get()
    if current is None:
        raise LookupError("no toolfan call is running here: call_context() serves tools")
    return current


@contextmanager
def serving(context: CallContext | None) -> Iterator[None]:
    """Make ``context`` the current call's while the block runs."""
    token = _CURRENT.set(context)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def within(context: CallContext | None, fn: Callable[[], T]) -> T:
    """``fn()`` with ``context`` current (an event loop started in it inherits it)."""
    with serving(context):
        return fn()


def is_context_annotation(annotation: Any) -> bool:
    """Whether a parameter's annotation asks for the call context.

    ``CallContext`` and ``CallContext | None`` (for a tool also called without toolfan).
    """
    if annotation is CallContext:
        return True
    args = getattr(annotation, "__args__", ())
    return bool(args) and CallContext in args and all(a in (CallContext, type(None)) for a in args)
