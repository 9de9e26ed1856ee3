"""A batch of one inline call is delivered by the worker that ran it, with no chord.

The session's prefork worker is the only one consuming ``toolfan.submit``; these tests stop
it consuming that queue (Celery's own ``cancel_consumer`` control) while a one-call batch
runs, so its answer can only come from the ``fn.inline`` worker itself. A batch of more
calls still goes through its chord and its one ``submit``; and a delivery in place that
fails is handed to a ``submit`` task, which delivers it.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

import toolfan
from dispatcher.devstack import wait_for
from dispatcher.sources.inline import NAME, SOURCE, batch_id, decode_answer
from dispatcher.waiting import wait_element
from handlers.result import CallResult
from tasks import keys, sources
from tasks.app import app
from tasks.delivery import Delivered, RetryLater
from tasks.envelope import Delivery
from tasks.execute import result_payload
from tasks.ledger import CallRecord, CallRef
from tasks.queues import ControlQueue
from tasks.runtime import get_ledger
from tasks.submit import deliver_here
from tests.e2e.test_inline import chat_call, runs
from tests.services import Worker

pytestmark = pytest.mark.usefixtures("worker", "api")

#: The session worker's node name (``-n test@%h``).
SESSION_WORKER = f"test@{socket.gethostname()}"
#: Seconds a worker may still take messages from a queue after it answered that it stopped
#: consuming it. On Redis the worker waits in a BRPOP naming its queues for up to kombu's
#: ``brpop_timeout`` (1 s), and kombu puts the cancel off until that read returns: a
#: ``submit`` sent meanwhile was taken (a CI run answered a batch of two in 12 ms).
READ_IN_FLIGHT = 1.5


@pytest.fixture
def no_submit_worker(worker: Worker) -> Iterator[None]:
    """No worker consumes ``toolfan.submit`` while the test runs."""
    queue = ControlQueue.SUBMIT.value
    replies = app.control.cancel_consumer(queue, destination=[SESSION_WORKER], reply=True)
    assert replies, f"{SESSION_WORKER} did not answer cancel_consumer"
    time.sleep(READ_IN_FLIGHT)
    try:
        yield
    finally:
        app.control.add_consumer(queue, destination=[SESSION_WORKER], reply=True)


def _state(call_id: str, conversation: str) -> str | None:
    bid = batch_id("chat", conversation, [call_id])
    record = get_ledger(NAME).record(CallRef(bid, "chat", call_id))
    return record.state if record is not None else None


def _submitted(record: CallRecord | None) -> bool:
    return record is not None and record.state == "submitted"


def test_one_call_is_answered_with_no_submit_worker(threads_worker, no_submit_worker, redis_client):
    conversation = f"conv-in-place-{uuid.uuid4().hex}"
    started = time.perf_counter()
    messages = toolfan.run_tool_calls(
        [chat_call("solo", "nap", {"key": conversation, "seconds": 0})],
        conversation_id=conversation,
        timeout=30,
    )
    elapsed = time.perf_counter() - started
    assert [m["content"] for m in messages] == [f"{conversation}:1"]
    # Without delivery in place the caller would wait its whole 30 s, then read the saved
    # result itself: the batch would never be marked submitted.
    assert elapsed < 10, f"the one call took {elapsed:.1f} s: nothing delivered it"
    # The answer is stored before the call is marked submitted: the caller may wake first.
    wait_for(lambda: _state("solo", conversation) == "submitted", 10, "the submitted mark")
    assert runs(redis_client, conversation) == 1


def test_two_calls_still_wait_for_their_one_submit(threads_worker, no_submit_worker):
    conversation = f"conv-chord-{uuid.uuid4().hex}"
    calls = [
        chat_call(f"pair_{i}", "nap", {"key": f"{conversation}{i}", "seconds": 0}) for i in (0, 1)
    ]
    started = time.perf_counter()
    messages = toolfan.run_tool_calls(calls, conversation_id=conversation, timeout=3)
    assert time.perf_counter() - started >= 3, "a batch of two was answered with no submit"
    assert [m["content"] for m in messages] == [f"{conversation}0:1", f"{conversation}1:1"]


class _Unreachable:
    """The inline source as this test process sees it: its delivery always fails."""

    name = NAME
    batch_label = "batch_id"
    delivers_in_place = True

    def __init__(self) -> None:
        self.attempts = 0

    def deliver(self, batch_id: str, results: Sequence[Mapping[str, Any]]) -> Delivered:
        self.attempts += 1
        raise RetryLater("the answer list is unreachable (test)", status="retry")


@pytest.fixture
def unreachable_here() -> Iterator[_Unreachable]:
    failing = _Unreachable()
    sources.register(failing)
    try:
        yield failing
    finally:
        sources.register(SOURCE)


def test_a_failed_delivery_in_place_is_handed_to_a_submit(unreachable_here, redis_client):
    """Here the delivery fails; the session worker's ``submit`` (real source) delivers it."""
    ledger = get_ledger(NAME)
    bid, token, ref = f"in_place_{uuid.uuid4().hex}", uuid.uuid4().hex, None
    ref = CallRef(bid, "chat", "c1")
    assert ledger.claim(bid, token, 60_000)
    saved = ledger.finish(ref, CallResult.ok("42"))
    delivery = Delivery(NAME, bid, token, (("chat", "c1"),), 60_000, time.time())

    deliver_here(delivery.to_wire(), [result_payload(ref, "add", saved)])

    assert unreachable_here.attempts == 1
    raw = wait_element(redis_client, keys.answer(NAME, bid), 20)
    assert raw is not None, "the handed-on submit did not deliver the batch"
    assert decode_answer(raw)["c1"]["output"] == "42"
    # The answer is stored before the call is marked submitted: wait for the mark.
    wait_for(lambda: _submitted(ledger.record(ref)), 10, "the submitted mark")
