"""Runner threads: reused between calls, never held up by a call that overran."""

import os
import threading
import time

import pytest

from handlers.threads import CallTimeout, RunnerPool


def test_value_and_exception_come_back_to_the_caller():
    pool = RunnerPool()
    assert pool.run(lambda: 42, 1.0) == 42
    with pytest.raises(ZeroDivisionError):
        pool.run(lambda: 1 / 0, 1.0)


def test_one_thread_serves_calls_made_one_after_another():
    pool = RunnerPool()
    seen = [pool.run(threading.current_thread, 1.0) for _ in range(20)]
    assert all(t is seen[0] for t in seen)
    assert seen[0] is not threading.current_thread()


def test_an_overrunning_call_times_out_and_holds_up_nothing():
    pool = RunnerPool()
    release = threading.Event()
    started = time.perf_counter()
    with pytest.raises(CallTimeout):
        pool.run(release.wait, 0.1)
    assert time.perf_counter() - started < 1.0
    assert pool.run(lambda: "next", 1.0) == "next"  # a new thread: the first is still busy
    release.set()
    time.sleep(0.1)
    threads = {pool.run(threading.current_thread, 1.0) for _ in range(5)}
    assert len(threads) == 1  # the overrun thread finished and was reused, or the other


def test_concurrent_callers_each_get_a_thread():
    pool = RunnerPool()
    barrier = threading.Barrier(4, timeout=5)
    results: list[int] = []

    def caller(i: int) -> None:
        def work() -> int:
            barrier.wait()  # returns only once all four calls run at the same time
            return i

        results.append(pool.run(work, 5.0))

    callers = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(10)
    assert sorted(results) == [0, 1, 2, 3]


def test_a_forked_child_starts_its_own_threads():
    pool = RunnerPool()
    assert pool.run(lambda: "parent", 1.0) == "parent"  # leaves an idle thread behind
    pid = os.fork()
    if pid == 0:  # the child: the parent's idle thread does not exist here
        try:
            os._exit(0 if pool.run(lambda: "child", 2.0) == "child" else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_an_overrun_loop_is_stopped_and_its_thread_never_reused():
    pool = RunnerPool()
    ticks = [0]

    def spin() -> None:
        while True:
            ticks[0] += 1

    with pytest.raises(CallTimeout):
        pool.run(spin, 0.1)
    time.sleep(0.1)
    stopped_at = ticks[0]
    time.sleep(0.2)
    assert ticks[0] == stopped_at, "the runaway loop kept running"
    assert pool.stuck() == 0
    assert pool.run(lambda: "next", 1.0) == "next"


def test_a_call_that_will_not_stop_is_reported_stuck():
    pool = RunnerPool()
    told: list[bool] = []
    pool.on_stuck = lambda: told.append(True)
    release = threading.Event()

    def stubborn() -> None:
        while not release.is_set():
            try:
                while not release.is_set():
                    pass
            except BaseException:
                continue

    with pytest.raises(CallTimeout):
        pool.run(stubborn, 0.1)
    assert told == [True]
    assert pool.stuck() == 1
    release.set()
    wait = time.monotonic() + 5
    while pool.stuck() and time.monotonic() < wait:
        time.sleep(0.05)
    assert pool.stuck() == 0
