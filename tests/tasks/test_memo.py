"""The poller's memo of its own dispatches: when it may skip a session without a full read."""

import sys
import threading
import time

from tasks.memo import DispatchMemo

CALLS = [("turn_1", "call_a"), ("turn_1", "call_b")]


def test_own_live_claim_covering_the_listed_calls_is_in_flight():
    memo = DispatchMemo()
    memo.remember("sess_1", "tok", CALLS, time.time() + 60)
    assert memo.candidates(["sess_1", "sess_2"]) == ["sess_1"]
    assert memo.in_flight("sess_1", "tok", CALLS)
    assert memo.in_flight("sess_1", "tok", CALLS[:1])


def test_a_claim_gone_or_taken_over_means_a_full_read_from_then_on():
    memo = DispatchMemo()
    memo.remember("sess_1", "tok", CALLS, time.time() + 60)
    memo.remember("sess_2", "tok2", CALLS, time.time() + 60)
    assert not memo.in_flight("sess_1", None, CALLS)  # submitted, abandoned or expired
    assert not memo.in_flight("sess_2", "other", CALLS)  # another dispatch owns it now
    assert memo.candidates(["sess_1", "sess_2"]) == []
    assert len(memo) == 0


def test_a_call_this_process_never_sent_is_not_covered():
    memo = DispatchMemo()
    memo.remember("sess_1", "tok", CALLS[:1], time.time() + 60)
    assert not memo.in_flight("sess_1", "tok", CALLS)


def test_dispatches_past_their_recheck_time_are_read_in_full():
    memo = DispatchMemo()
    memo.remember("sess_past", "tok", CALLS, time.time() - 1)  # never stored
    memo.remember("sess_soon", "tok", CALLS, time.time() + 0.05)
    assert len(memo) == 1
    time.sleep(0.1)
    assert memo.candidates(["sess_soon"]) == []
    memo.remember("sess_soon", "tok", CALLS, time.time() + 0.05)
    time.sleep(0.1)
    memo.prune()
    assert len(memo) == 0


def test_remembering_sweeps_out_dispatches_past_their_moment_without_a_pass(monkeypatch):
    # A worker that only runs push tasks never ends a poll pass (which prunes): without
    # its own sweep the memo kept every dispatch until LIMIT.
    from tasks import memo as memo_module

    clock = [1_000_000.0]
    monkeypatch.setattr(memo_module.time, "time", lambda: clock[0])
    memo = DispatchMemo()
    for i in range(100):
        memo.remember(f"sess_{i}", "tok", CALLS, clock[0] + 10)
    clock[0] += 11  # every one of them is past its moment, not yet swept
    memo.remember("sess_new", "tok", CALLS, clock[0] + 10)
    assert len(memo) == 101
    clock[0] += memo_module.SWEEP_EVERY
    memo.remember("sess_newer", "tok", CALLS, clock[0] + 10)
    assert len(memo) == 1 and memo.candidates(["sess_newer"]) == ["sess_newer"]


def test_the_oldest_dispatches_are_forgotten_beyond_the_limit():
    memo = DispatchMemo(limit=2)
    for i in range(3):
        memo.remember(f"sess_{i}", "tok", CALLS, time.time() + 60)
    assert memo.candidates(["sess_0", "sess_1", "sess_2"]) == ["sess_1", "sess_2"]


def test_threads_sharing_a_memo_never_trip_over_each_others_forgetting() -> None:
    # A worker on threads runs push and poll tasks of one process at once, all on the
    # process's one poller and memo: entries expire, get pruned and are replaced under
    # each other's feet, and no call may raise for it.
    memo = DispatchMemo(limit=8)
    failures: list[BaseException] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the interpreter over as often as it can

    def churn(seed: int) -> None:
        try:
            for i in range(3000):
                key = f"s{(seed + i) % 12}"
                memo.remember(key, "t", [("turn", "c")], time.time() + 0.0005)
                memo.candidates([f"s{j}" for j in range(12)])
                memo.in_flight(key, "t", [("turn", "c")])
                if i % 7 == 0:
                    memo.prune()
        except BaseException as exc:  # collected: the test fails on any of them
            failures.append(exc)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert failures == []
    assert len(memo) <= 8
