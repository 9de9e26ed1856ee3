"""A conversation step that raises ends the conversation with the reason, or retries a blip.

The step task runs in this process (``advance.run``) on the test Redis: what is tested is
what the task does with an exception nothing inside the step expected.
"""

from __future__ import annotations

import pytest
import redis
from celery.exceptions import Retry

import toolfan
from dispatcher.conversations import step
from dispatcher.conversations.step import advance


@pytest.fixture
def conversation(redis_client) -> str:
    return toolfan.start_conversation(input="hello", model="scripted")


def test_a_step_that_raises_fails_the_conversation_with_the_reason(conversation, monkeypatch):
    def broken(self: step.Step, look: int | None = None) -> str:
        raise TypeError("unhashable type: 'dict'")

    monkeypatch.setattr(step.Step, "advance", broken)
    assert advance.run(conversation) == "failed"
    result = toolfan.conversation_result(conversation, timeout=0)
    assert result.status == "failed"
    assert result.reason == (
        "toolfan could not advance the conversation: TypeError: unhashable type: 'dict'"
    )


def test_a_redis_blip_retries_the_step_and_a_lasting_one_fails_it(conversation, monkeypatch):
    def cut(self: step.Step, look: int | None = None) -> str:
        raise redis.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(step.Step, "advance", cut)
    retried: list[float] = []

    def retry(**options: object) -> Retry:
        retried.append(float(options["countdown"]))  # type: ignore[arg-type]
        return Retry()

    monkeypatch.setattr(advance, "retry", retry)
    with pytest.raises(Retry):
        advance.run(conversation)
    assert retried == [1.0]
    assert toolfan.conversation_result(conversation, timeout=0).status == "running"
    advance.request.retries = step.STEP_RETRIES  # the outage outlasted every retry
    try:
        assert advance.run(conversation) == "failed"
    finally:
        advance.request.retries = 0
    assert (
        "ConnectionError: Connection reset by peer"
        in toolfan.conversation_result(conversation, timeout=0).reason
    )
