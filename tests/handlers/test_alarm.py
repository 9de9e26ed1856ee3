"""Calls timed on the task's own thread (a prefork pool process's way), in this process.

Each test enables an alarm of its own and gives ``SIGALRM`` back to its old handler after.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from handlers import runner
from handlers.alarm import STOP_GRACE, Alarm
from handlers.context import CallContext, call_context
from handlers.registry import Registry
from handlers.result import Outcome
from handlers.threads import CallTimeout


@pytest.fixture
def alarm() -> Iterator[Alarm]:
    before = signal.getsignal(signal.SIGALRM)
    stuck: list[tuple[CallContext | None, float]] = []
    timed = Alarm()
    assert timed.enable(lambda context, timeout: stuck.append((context, timeout)))
    timed.stuck = stuck  # type: ignore[attr-defined]
    try:
        yield timed
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def disarmed() -> bool:
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_call_runs_on_the_calling_thread_and_leaves_no_timer(alarm: Alarm) -> None:
    assert alarm.usable()
    assert alarm.run(threading.current_thread, 5.0, None) is threading.main_thread()
    assert disarmed()
    with pytest.raises(KeyError):
        alarm.run(lambda: {}["missing"], 5.0, None)
    assert disarmed()


@pytest.mark.parametrize("kind", ["sleep", "loop"])
def test_an_overrun_call_is_stopped_at_its_deadline(alarm: Alarm, kind: str) -> None:
    ticks = [0]

    def overrun() -> None:
        if kind == "sleep":
            time.sleep(30)
        while True:
            ticks[0] += 1

    started = time.monotonic()
    with pytest.raises(CallTimeout):
        alarm.run(overrun, 0.2, None)
    assert 0.2 <= time.monotonic() - started < 1.0
    assert disarmed()
    stopped_at = ticks[0]
    time.sleep(0.1)
    assert ticks[0] == stopped_at  # the call itself ended: nothing keeps running
    assert alarm.run(lambda: "next", 1.0, None) == "next"
    assert alarm.stuck == []  # type: ignore[attr-defined]


def test_a_call_that_swallows_the_alarm_and_returns_late_is_still_timed_out(alarm: Alarm) -> None:
    def swallowing() -> str:
        try:
            time.sleep(30)
        except BaseException:
            time.sleep(0.05)
        return "too late"

    with pytest.raises(CallTimeout):
        alarm.run(swallowing, 0.1, None)
    assert disarmed()


def test_a_call_that_turns_the_alarm_into_its_own_error_is_timed_out(alarm: Alarm) -> None:
    def rethrowing() -> None:
        try:
            time.sleep(30)
        except BaseException as exc:
            raise RuntimeError("interrupted") from exc

    with pytest.raises(CallTimeout):
        alarm.run(rethrowing, 0.1, None)
    assert disarmed()


def test_a_call_that_will_not_stop_is_handed_to_on_stuck(alarm: Alarm) -> None:
    release = threading.Event()
    context = CallContext("agents", "sess", "turn", "call", "stubborn")

    def stubborn() -> None:
        while not release.is_set():
            try:
                while not release.is_set():
                    time.sleep(0.01)
            except BaseException:
                continue

    threading.Timer(0.1 + STOP_GRACE + 0.5, release.set).start()
    with pytest.raises(CallTimeout):  # once it finally returns, it is still timed out
        alarm.run(stubborn, 0.1, context)
    assert alarm.stuck == [(context, 0.1)]  # type: ignore[attr-defined]


def test_the_timer_is_used_only_where_it_can_time_the_call(alarm: Alarm) -> None:
    seen: list[bool] = []
    other = threading.Thread(target=lambda: seen.append(alarm.usable()))
    other.start()
    other.join()
    assert seen == [False]  # signals reach the main thread only
    assert alarm.run(alarm.usable, 1.0, None) is False  # a call within a timed call
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # a tool took the signal over
    assert not alarm.usable()
    assert not Alarm().usable()  # never enabled


TOOLS = Registry()


@TOOLS.tool(timeout=0.3)
def where_run() -> str:
    """The thread the call runs on, and the call it serves."""
    return f"{threading.current_thread().name} {call_context().call_id}"


@TOOLS.tool(timeout=0.3)
def hang() -> str:
    """Sleeps past its timeout."""
    time.sleep(10)
    return "never"


def test_run_call_uses_the_timer_once_enabled(alarm: Alarm, monkeypatch: Any) -> None:
    context = CallContext("agents", "sess", "turn", "call_7", "where_run")
    probe, hung = TOOLS.get("where_run"), TOOLS.get("hang")
    assert probe is not None and hung is not None
    args = probe.parse("{}")
    before = runner.run_call(probe, args, {}, call_context=context)
    assert before.output is not None and before.output == "toolfan-call call_7"
    monkeypatch.setattr(runner, "ALARM", alarm)
    result = runner.run_call(probe, args, {}, call_context=context)
    assert result.success and result.output == "MainThread call_7"
    with pytest.raises(LookupError):  # the context is current only while the call runs
        call_context()
    late = runner.run_call(hung, hung.parse("{}"), {}, call_context=context)
    assert (late.outcome, late.error) == (Outcome.TIMEOUT, "Function 'hang' timed out after 0.3 s")
    assert disarmed()
