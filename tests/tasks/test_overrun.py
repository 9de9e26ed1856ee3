"""A call that would not stop on a pool process's own thread: answered, then the process ends.

The watchdog (``handlers.alarm``) calls ``answer_and_leave``; here it is called directly,
with the process's exit replaced by a record of it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

from handlers.context import CallContext
from handlers.result import Outcome
from tasks import overrun
from tasks.ledger import CallRef, LedgerError


def timeouts(function: str) -> float:
    value = REGISTRY.get_sample_value(
        "toolfan_calls_total", {"function": function, "outcome": "timeout"}
    )
    return value or 0.0


@pytest.fixture
def left(monkeypatch: Any) -> list[bool]:
    ended: list[bool] = []
    monkeypatch.setattr(overrun, "leave", lambda: ended.append(True))
    return ended


def test_its_timeout_answer_is_saved_and_counted_before_the_process_ends(
    ledger: Any, left: list[bool]
) -> None:
    batch = f"sess_{uuid.uuid4().hex[:8]}"
    context = CallContext("agents", batch, "turn_1", "call_1", "stubborn_tool")
    counted = timeouts("stubborn_tool")
    overrun.answer_and_leave(context, 2.0)
    saved = ledger.saved(CallRef(batch, "turn_1", "call_1"))
    assert saved is not None
    assert (saved.outcome, saved.error) == (
        Outcome.TIMEOUT,
        "Function 'stubborn_tool' timed out after 2 s",
    )
    assert timeouts("stubborn_tool") == counted + 1
    assert left == [True]


def test_the_process_ends_even_when_the_answer_cannot_be_saved(
    monkeypatch: Any, left: list[bool], caplog: Any
) -> None:
    class Down:
        def finish(self, ref: CallRef, result: Any) -> Any:
            raise LedgerError("Redis is down")

    monkeypatch.setattr(overrun, "get_ledger", lambda source: Down())
    context = CallContext("agents", "sess_down", "turn_1", "call_1", "stubborn_down")
    overrun.answer_and_leave(context, 2.0)
    assert left == [True]
    assert timeouts("stubborn_down") == 0.0
    assert "the redelivered message runs it again" in caplog.text
    assert "session_id=sess_down" in caplog.text
