"""The soak's ``run_tool_calls`` batches: an application's share of the load, and their tally.

An application that drives Chat Completions itself hands each model answer's tool calls
to :func:`toolfan.run_tool_calls` from its request threads and blocks until the ``tool``
messages come back. Here the soak process is that application: batches of the same mix of
calls as the sessions arrive at Poisson times and go to a few caller threads (a batch that
finds them all busy waits for one, and that wait counts in its time to answer, as a
request queued in a busy server's would). Each answer is checked against the plan: every
call answered once, in order, with the tool's output or, for the failing tool, toolfan's
``{"error": ...}`` text; a call answered with the timeout error, or a call that raised,
is a problem of its own.
"""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.inline import ToolCall
from bench.soak_load import FAIL_TOOL, Arrivals, Problems, draw_calls, draw_count, mean_calls
from bench.soak_runs import as_planned

#: Caller threads: enough for the batches in flight while a killed worker's calls wait to
#: be restored, few enough that their Redis connections stay a handful.
CALLERS = 8
#: Seconds a caller waits for its answer (``run_tool_calls``'s default).
TIMEOUT = 60.0
#: What toolfan's answer to a call the caller stopped waiting for says.
TIMED_OUT = "did not finish within"


@dataclass(frozen=True)
class BatchPlan:
    """One ``run_tool_calls`` to make: its conversation, its calls, per call id success."""

    conversation: str
    calls: list[ToolCall]
    expect: dict[str, bool]


@dataclass(frozen=True)
class BatchAnswer:
    """One batch as answered: when it arrived (wall clock), how long it took, what came back.

    ``messages`` is None when ``run_tool_calls`` raised; ``error`` then says what.
    """

    plan: BatchPlan
    at: float
    seconds: float
    messages: list[dict[str, Any]] | None
    error: str | None = None


def plan_batch(rng: random.Random, n: int, seed: int) -> BatchPlan:
    """One model answer's tool calls, drawn from the sessions' mix, in a conversation of its own."""
    calls = draw_calls(rng, draw_count(rng))
    ids = [f"call_{i}" for i in range(len(calls))]
    chat = [
        {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(a)}}
        for i, (name, a) in zip(ids, calls, strict=True)
    ]
    expect = {i: name != FAIL_TOOL for i, (name, _) in zip(ids, calls, strict=True)}
    return BatchPlan(f"soak-{seed}-{n}", chat, expect)


class InlineCaller(Arrivals[BatchPlan, BatchAnswer]):
    """Hands batches to caller threads at Poisson arrival times.

    Args:
        rate: Calls per second to offer (batches arrive at ``rate`` / mean calls).
        seed: Seed of the arrivals and of the mix.
        callers: Caller threads.
        timeout: ``run_tool_calls``'s ``timeout``.
    """

    def __init__(
        self, rate: float, seed: int, callers: int = CALLERS, timeout: float = TIMEOUT
    ) -> None:
        super().__init__("soak-inline", rate / mean_calls(), seed)
        self.seed = seed
        self.timeout = timeout
        self.pool = ThreadPoolExecutor(callers, thread_name_prefix="soak-caller")
        self._pending = 0
        self._pending_lock = threading.Lock()

    def plan(self, n: int) -> BatchPlan:
        """One batch of the mix."""
        return plan_batch(self.rng, n, self.seed)

    def send(self, plans: list[BatchPlan]) -> None:
        """Hand each batch to a caller thread (it waits for one if all are busy)."""
        for plan in plans:
            with self._pending_lock:
                self._pending += 1
            self.pool.submit(self._call, plan, time.time())

    def _call(self, plan: BatchPlan, at: float) -> None:
        """One ``run_tool_calls``, timed from the batch's arrival; kept whatever happens."""
        import toolfan

        messages: list[dict[str, Any]] | None = None
        error = None
        try:
            messages = toolfan.run_tool_calls(
                plan.calls, conversation_id=plan.conversation, timeout=self.timeout
            )
        except Exception:  # a problem to count, not a reason to stop the load
            error = traceback.format_exc(limit=3)
        finally:
            self.keep([BatchAnswer(plan, at, time.time() - at, messages, error)])
            with self._pending_lock:
                self._pending -= 1

    def in_flight(self) -> int:
        """Batches handed to callers and not yet answered."""
        with self._pending_lock:
            return self._pending

    def release(self) -> None:
        """Let the callers finish their batches."""
        self.pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class InlineTally(Problems):
    """Batches and calls answered by ``run_tool_calls``, checked against their plans.

    ``duplicated`` counts calls named more than once in an answer; ``wrong`` calls answered
    with the other outcome than planned, out of order or unasked for; ``missing`` calls
    left out; ``timed_out`` calls answered with the timeout error; ``raised`` batches whose
    ``run_tool_calls`` raised.
    """

    batches: int = 0
    timed_out: int = 0
    raised: int = 0

    def add(self, answers: Iterable[BatchAnswer]) -> None:
        """Check answers against their plans."""
        for answer in answers:
            self.batches += 1
            self.calls += len(answer.plan.calls)
            if answer.messages is None:
                self.raised += 1
                self._problem(f"{answer.plan.conversation}: raised {answer.error}")
                continue
            self._check(answer.plan, answer.messages)

    def _check(self, plan: BatchPlan, messages: list[dict[str, Any]]) -> None:
        ids = [m.get("tool_call_id") for m in messages]
        if ids != list(plan.expect):
            self.wrong += 1  # out of order, or not the calls asked
            self._problem(f"{plan.conversation}: answered {ids} for {list(plan.expect)}")
        for call_id in plan.expect:
            count = ids.count(call_id)
            self.missing += count == 0
            self.duplicated += count > 1
        for message, named in zip(messages, ids, strict=True):
            content = message.get("content")
            self.answered += named in plan.expect
            if isinstance(content, str) and TIMED_OUT in content:
                self.timed_out += 1
                self._problem(f"{plan.conversation}: {named!r} timed out: {content[:200]}")
            elif named not in plan.expect or not as_planned(content, plan.expect[named]):
                self.wrong += 1
                self._problem(f"{plan.conversation}: {named!r} answered {content!r:.200}")
            else:
                self.failures += not plan.expect[named]

    @property
    def errors(self) -> int:
        """Calls lost, given twice, wrong or timed out, and batches that raised."""
        return super().errors + self.timed_out + self.raised

    def to_json(self) -> dict[str, Any]:
        """The tally as data."""
        return {
            "batches": self.batches,
            "calls": self.calls,
            "answered_calls": self.answered,
            "failures_answered": self.failures,
            "duplicated": self.duplicated,
            "wrong": self.wrong,
            "missing": self.missing,
            "timed_out": self.timed_out,
            "raised": self.raised,
            "problems": self.problems,
        }


def batch_times(answers: Sequence[BatchAnswer]) -> list[tuple[float, float]]:
    """(arrived at, seconds to answer) of each batch that was answered."""
    return [(a.at, a.seconds) for a in answers if a.messages is not None]
