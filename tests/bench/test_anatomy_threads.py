"""``bench.anatomy_threads``: the threads' windows count what ran, and a part's cost shows."""

from __future__ import annotations

import threading
import time

import pytest

from bench.anatomy_threads import Callers, ThreadsConfig, alternating, measure_threads, weigh

#: Seconds of CPU a switched-on "part" burns per call, in pure Python (holding the lock).
SPIN = 0.0004


def _spin(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_every_call_the_threads_made_is_counted() -> None:
    made, lock = [0], threading.Lock()

    def call() -> None:
        with lock:
            made[0] += 1

    with Callers(call, 8) as callers:
        us, rate = callers.window(0.2)
        assert us > 0 and rate > 0
    assert callers.calls() == made[0] > 0


def test_a_call_that_raises_stops_the_window_with_its_error() -> None:
    made = [0]

    def call() -> None:
        made[0] += 1
        if made[0] > 20:
            raise ValueError("the tool broke")

    with Callers(call, 2) as callers, pytest.raises(RuntimeError, match="the tool broke"):
        callers.window(0.2)


def test_a_part_that_costs_cpu_is_weighed_and_switched_back_on() -> None:
    on = [True]

    def call() -> None:
        if on[0]:
            _spin(SPIN)
        time.sleep(0.001)  # a wait, as a call's round trips are

    def switch(value: bool) -> None:
        on[0] = value

    config = ThreadsConfig(threads=4, seconds=0.3, pairs=2)
    with Callers(call, config.threads) as callers:
        weighed = weigh(callers, switch, config)
    assert on[0] is True
    assert weighed["us"] > SPIN * 1e6 / 2
    assert all(w > wo for w, wo in zip(weighed["with"], weighed["without"], strict=True))


def test_the_body_and_every_named_part_are_weighed() -> None:
    on = {"a": True, "b": True}

    def call() -> None:
        _spin(SPIN if on["a"] else 0)
        time.sleep(0.001)

    def switch(name: str) -> object:
        return lambda value: on.__setitem__(name, value)

    config = ThreadsConfig(threads=3, seconds=0.2, pairs=2, windows=2)
    figures = measure_threads(call, {"a": switch("a"), "b": switch("b")}, ["a", "b"], config)
    assert set(figures["parts"]) == {"a", "b"}
    assert len(figures["body_rounds"]) == 2
    assert figures["body_us"] > SPIN * 1e6 / 2
    assert figures["parts"]["a"]["us"] > figures["parts"]["b"]["us"]
    assert on == {"a": True, "b": True}


def test_pairs_alternate_their_order_and_the_part_is_always_switched_back_on() -> None:
    states: list[bool] = []
    on = [True]

    def switch(value: bool) -> None:
        on[0] = value

    kept, dropped = alternating(switch, lambda: states.append(on[0]) or on[0], 3)
    assert states == [False, True, True, False, False, True]
    assert (kept, dropped) == ([True] * 3, [False] * 3)
    assert on[0] is True

    def broken() -> bool:
        raise RuntimeError("the measurement broke")

    with pytest.raises(RuntimeError):
        alternating(switch, broken, 2)
    assert on[0] is True
