"""Running one batch of inline calls on the fleet, and waiting for its answer.

The batch goes through the engine's own path (claim, ledger, one chord, one submit); the
caller waits with one blocking read of the batch's answer list, which delivery fills, so
waiting costs no polling loop. When the caller's time runs out first, every call still
unfinished is answered with a timeout error in the ledger (a result saved first still
wins), and that answer is stored as the batch's: a repeat gets the same, and a call still
queued never runs, since its worker finds the saved error.

The wait is cut into looks a heartbeat (``TOOLFAN_HEARTBEAT``) apart. Between them the
caller does for its batch what a poll pass does for a session: the broker can lose a
message to a worker killed after it popped it and before it recorded it as taken (the
reply dies in the worker's socket, and the reaper finds nothing to put back), so a
dispatch from before a worker's death that still has a call that never began on an empty
queue is dispatched again, as soon as the reaper has had its turn. Without that look the
call would be answered with a timeout error when the caller's time ran out.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import redis.asyncio

from dispatcher.sources.inline import NAME, SOURCE, batch_id, decode_answer
from dispatcher.sources.inline_calls import Api, InlineCall
from dispatcher.waiting import await_element, wait_element
from handlers.result import CallResult, Outcome
from tasks import keys
from tasks.approvals import ApprovalStore, State, approval_id
from tasks.dispatch import Batch, DispatchCounts, Dispatcher, PendingCall
from tasks.execute import result_payload
from tasks.ledger import CallRef, Ledger
from tasks.liveness import Reaper
from tasks.runtime import get_ledger, get_settings, load_registry, new_reaper
from tasks.settings import Settings

Results = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class InlineBatch:
    """A batch of inline calls: its id and its distinct calls (the first of a repeated id).

    Attributes:
        api: The protocol; it is the turn id of every call, so the two never share records.
        batch_id: From the protocol, the conversation and the sorted call ids.
        calls: Each call id once.
        metadata: What the application says of whom the calls serve, for the tools'
            ``CallContext.metadata`` (not part of the batch's identity).
    """

    api: Api
    batch_id: str
    calls: tuple[InlineCall, ...]
    metadata: Mapping[str, str] | None = None

    @classmethod
    def of(
        cls,
        api: Api,
        calls: Sequence[InlineCall],
        conversation_id: str | None,
        metadata: Mapping[str, str] | None = None,
    ) -> InlineBatch:
        """The batch of ``calls`` in ``conversation_id``."""
        distinct: dict[str, InlineCall] = {}
        for call in calls:
            distinct.setdefault(call.call_id, call)
        bid = batch_id(api.value, conversation_id, list(distinct))
        return cls(api, bid, tuple(distinct.values()), metadata)

    def ref(self, call: InlineCall) -> CallRef:
        """The ledger's name for one of its calls."""
        return CallRef(self.batch_id, self.api.value, call.call_id)

    @property
    def answer_key(self) -> str:
        """Where its answer is delivered."""
        return keys.answer(NAME, self.batch_id)


def check_timeout(timeout: float) -> float:
    """``timeout`` if it is a positive number of seconds.

    Raises:
        ValueError: it is not.
    """
    if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


class InlineRunner:
    """Starts inline batches and waits for their answers.

    Args:
        ledger: The ``inline`` source's ledger; this process's by default.
        settings: Budgets and limits; this process's by default.
    """

    def __init__(self, ledger: Ledger | None = None, settings: Settings | None = None) -> None:
        self.ledger = ledger if ledger is not None else get_ledger(NAME)
        self.settings = settings if settings is not None else get_settings()

    # -- the steps ------------------------------------------------------------------------

    def answered(self, batch: InlineBatch) -> Results | None:
        """The batch's stored answer, if it was delivered before."""
        raw = self.ledger.client.lindex(batch.answer_key, 0)
        return decode_answer(str(raw)) if raw is not None else None

    def start(
        self,
        batch: InlineBatch,
        *,
        allowed: Collection[str] | None = None,
        then: str | None = None,
        look: bool = False,
    ) -> None:
        """Dispatch the batch's unfinished calls; calls that cannot run are answered first.

        ``allowed`` limits the functions the batch may call; ``then`` names the task that
        continues once it is answered (``{"task", "args"}`` as JSON). With ``look``, a
        batch already in flight is also looked at for calls lost with a dead worker
        (:meth:`recover`).
        """
        if then is not None:
            self.ledger.client.set(keys.then(NAME, batch.batch_id), then, ex=self.ledger.ttl)
        for call in batch.calls:
            refusal = _refusal(call, allowed)
            if refusal is not None:
                self.ledger.finish(batch.ref(call), CallResult.fail(*refusal))
        if look:
            self.recover(batch)
        else:
            self._dispatch(batch, Dispatcher(NAME, self.ledger, self.settings, noun="batch"))

    def _dispatch(self, batch: InlineBatch, dispatcher: Dispatcher) -> None:
        pending = [
            PendingCall(batch.api.value, c.call_id, c.name, c.arguments, c.problem)
            for c in batch.calls
        ]
        whole = Batch(batch.batch_id, pending, metadata=batch.metadata)
        dispatcher.dispatch([whole], DispatchCounts())

    def recover(self, batch: InlineBatch) -> None:
        """Dispatch again the calls of the batch that a dead worker took with it.

        The look a poll pass takes at a session it finds in flight: with a worker dead
        since the batch's dispatch, and the reaper's turn past, a call that never began
        on an empty queue (or a whole batch whose submit went down) is dispatched again;
        otherwise nothing is sent. One look at a time in this process, since the reaper's
        broker connection is not for several threads at once.
        """
        with _LOOKING:
            reaper = _reaper()
            dispatcher = Dispatcher(NAME, self.ledger, self.settings, reaper=reaper, noun="batch")
            dispatcher.begin_pass()
            self._dispatch(batch, dispatcher)

    def wait(self, batch: InlineBatch, seconds: float) -> Results | None:
        """The batch's answer once delivered, or None after ``seconds``.

        A look for calls lost with a dead worker (:meth:`recover`) every heartbeat.
        """
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            raw = wait_element(self.ledger.client, batch.answer_key, min(left, self._look))
            if raw is not None:
                return decode_answer(raw)
            if deadline - time.monotonic() <= 0:
                return None
            self.recover(batch)

    @property
    def _look(self) -> float:
        """Seconds between two looks for lost calls."""
        return self.settings.heartbeat

    def expire(self, batch: InlineBatch, seconds: float) -> Results:
        """Answer the unfinished calls with timeout errors, and store the batch's answer."""
        results = []
        for call in batch.calls:
            error = CallResult.fail(
                Outcome.TIMEOUT,
                f"Function {call.name!r} did not finish within the {seconds:g} s the caller "
                "waited; it was answered with this error",
            )
            saved = self.ledger.finish(batch.ref(call), error)
            results.append(result_payload(batch.ref(call), call.name, saved))
        self._withdraw_approvals(batch, seconds)
        SOURCE.deliver(batch.batch_id, results)
        answer = self.answered(batch)
        return answer if answer is not None else {r["call_id"]: r for r in results}

    def _withdraw_approvals(self, batch: InlineBatch, seconds: float) -> None:
        """Close the batch's undecided approvals: nobody waits for their answer any more."""
        store = ApprovalStore(self.ledger.client, self.ledger.ttl)
        why = f"the caller stopped waiting after {seconds:g} s"
        for call in batch.calls:
            aid = approval_id(NAME, batch.batch_id, batch.api.value, call.call_id)
            store.decide(aid, State.TIMED_OUT, "toolfan", why, withdraw=True)

    # -- the whole -----------------------------------------------------------------------

    def run(
        self,
        batch: InlineBatch,
        timeout: float,
        *,
        allowed: Collection[str] | None = None,
        then: str | None = None,
    ) -> Results:
        """Every call's result, by call id: saved, delivered, or a timeout error."""
        if not batch.calls:
            return {}
        found = self.answered(batch)
        if found is not None:
            return found
        deadline = time.monotonic() + timeout
        self.start(batch, allowed=allowed, then=then)
        found = self.wait(batch, deadline - time.monotonic())
        return found if found is not None else self.expire(batch, timeout)

    async def arun(
        self, batch: InlineBatch, timeout: float, *, allowed: Collection[str] | None = None
    ) -> Results:
        """:meth:`run` for an event loop: the wait blocks no thread."""
        if not batch.calls:
            return {}
        found = await asyncio.to_thread(self.answered, batch)
        if found is not None:
            return found
        deadline = time.monotonic() + timeout
        await asyncio.to_thread(self.start, batch, allowed=allowed)
        client = _async_client(self.settings.redis_url)
        while (left := deadline - time.monotonic()) > 0:
            raw = await await_element(client, batch.answer_key, min(left, self._look))
            if raw is not None:
                return decode_answer(raw)
            if deadline - time.monotonic() > 0:
                await asyncio.to_thread(self.recover, batch)
        return await asyncio.to_thread(self.expire, batch, timeout)


def _refusal(call: InlineCall, allowed: Collection[str] | None) -> tuple[Outcome, str] | None:
    """Why a call is answered without being sent, if it is."""
    if call.refusal is not None:
        return Outcome.INVALID_ARGUMENTS, call.refusal
    if allowed is not None and call.name not in allowed:
        names = ", ".join(sorted(n for n in allowed if n in load_registry())) or "(none)"
        shown = call.name if len(call.name) <= 200 else f"{call.name[:200]}..."
        return Outcome.UNKNOWN_FUNCTION, f"Function {shown!r} is not available. Available: {names}"
    return None


#: One look for lost calls at a time in this process (see :meth:`InlineRunner.recover`).
_LOOKING = threading.Lock()


@cache
def _reaper() -> Reaper:
    """The one reaper of this process's looks, made on the first (each look takes ``_LOOKING``)."""
    return new_reaper()


#: One asyncio Redis client per event loop (a client cannot cross loops).
_ASYNC: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, redis.asyncio.Redis]]
_ASYNC = weakref.WeakKeyDictionary()


def _async_client(url: str) -> redis.asyncio.Redis:
    clients = _ASYNC.setdefault(asyncio.get_running_loop(), {})
    if url not in clients:
        clients[url] = redis.asyncio.Redis.from_url(url, decode_responses=True)
    return clients[url]
