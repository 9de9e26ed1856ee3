"""The whole path: emulator over HTTP, pollers, real worker processes, real Redis."""

import hashlib
import os
import subprocess
import sys
import threading
from collections import Counter

import pytest

from emulator import running_emulator
from tasks.join import JOIN
from tasks.scripts import FINISH, finish_then
from tests.e2e.harness import (
    answered,
    check_exactly_once,
    check_posted_once,
    poll_loop,
    poll_until,
    poller,
    poller_processes,
    results_by_call,
    seed,
    seed_untouched,
    settle,
)
from tests.services import ROOT, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def test_hundred_sessions_answered_exactly_once_with_mixed_outcomes(api, redis_client):
    seeded = seed(api, 60)
    seed_untouched(api, seeded)
    with poll_loop():
        wait_for(lambda: len(api.batches()) >= 20, 60, "the first answers")
        seed(api, 40, seeded)  # arrive while the poller runs
        wait_for(lambda: answered(api, seeded), 120, "every session to be answered", 0.1)
    settle(1.0)
    assert len(seeded.calls) == 100
    check_exactly_once(api, seeded, redis_client)
    results = results_by_call(api)
    for actions in seeded.calls.values():
        for action in actions:
            event = results[action["call_id"]]
            name, args = action["name"], action["arguments"]
            if name == "add" and isinstance(args.get("a"), int):
                assert event == {**event, "success": True, "output": str(args["a"] + 1)}
            elif name == "boom":
                assert event["error"] == "Function 'boom' failed: RuntimeError: kaboom"
            elif name == "no_such_tool":
                assert event["error"].startswith("Unknown function 'no_such_tool'")
            elif name == "refuse":
                assert event["error"] == "not today"
            elif name == "add":
                assert event["error"].startswith("Invalid arguments for add: a:")
    untouched = [api.session(sid) for sid in seeded.untouched]
    assert untouched[0]["required_actions"][0]["type"] == "mcp_approval_request"
    assert untouched[1]["status"] == "idle"


def test_summary_counts_and_other_types(api, redis_client):
    api.set_faults(apply_lag=60)  # answered actions stay listed through both polls
    seeded = seed(api, 3)
    seed_untouched(api, seeded)
    first = poller().poll_once()
    assert first.sessions_seen == 5
    assert first.sessions_pending == 3
    assert first.sessions_dispatched == 3
    assert first.calls_dispatched == sum(len(a) for a in seeded.calls.values())
    assert first.skipped_other == 1
    assert first.errors == 0
    second = poller().poll_once()  # claims held or results submitted: nothing dispatched
    assert second.calls_dispatched == 0
    assert second.skipped_in_flight + second.skipped_submitted == first.calls_dispatched
    wait_for(lambda: answered(api, seeded), 60, "answers")
    check_exactly_once(api, seeded, redis_client)


def test_two_pollers_at_once_dispatch_nothing_twice(api, redis_client):
    seeded = seed(api, 40)
    with poller_processes(2, 0.1):
        wait_for(lambda: answered(api, seeded), 120, "every session to be answered", 0.1)
        settle(1.0)
    check_exactly_once(api, seeded, redis_client)
    check_posted_once(api, seeded)


def test_lag_before_actions_clear_resends_nothing(api, redis_client):
    api.set_faults(apply_lag=2.0)  # ten poll intervals of 0.2 s
    seeded = seed(api, 10)
    with poll_loop(0.2) as passes:
        wait_for(lambda: answered(api, seeded), 60, "answers")
        settle(2.5)
    assert any(api.session(sid)["status"] != "requires_action" for sid in seeded.calls)
    check_exactly_once(api, seeded, redis_client)
    calls = sum(len(actions) for actions in seeded.calls.values())
    assert sum(p.calls_dispatched + p.calls_resubmitted for p in passes) == calls, (
        "a call was dispatched again during the lag"
    )
    assert sum(p.skipped_submitted for p in passes) > 0, "the lag never showed answered calls"
    check_posted_once(api, seeded)


def test_errors_and_throttling_on_events_still_one_batch_each(api, redis_client):
    api.set_faults(error_rate=0.3, throttle_rate=0.3, retry_after=0.1, endpoints={"events"}, seed=7)
    seeded = seed(api, 20)
    poll_until(api, seeded, timeout=120)
    settle(1.0)
    posts = api.requests("/events", method="POST")
    assert len(posts) > len(seeded.calls), "no fault was injected"
    assert {r.status for r in posts} >= {202, 429, 500}
    check_exactly_once(api, seeded, redis_client)


def test_lost_202_is_answered_by_the_replay(api, redis_client):
    api.set_faults(lost_202_rate=1.0, budget=5, endpoints={"events"})
    seeded = seed(api, 8)
    poll_until(api, seeded, timeout=60)
    settle(1.0)
    assert sum(b.lost for b in api.batches()) == 5
    keys = [r.idempotency_key for r in api.requests("/events", method="POST")]
    assert len(keys) > len(set(keys)), "no request was retried with its key"
    check_exactly_once(api, seeded, redis_client)


def test_poll_once_cli_exits_cleanly(api):
    seed(api, 1)
    out = subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", "poll", "--once"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("poll: 1 sessions seen, 1 with calls pending")


def test_poll_once_cli_fails_clearly_when_api_unreachable_or_key_refused(api):
    down = subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", "poll", "--once"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
    )
    assert down.returncode == 1
    assert down.stderr.startswith("toolfan: poll failed: RetriesExhausted")
    assert len(down.stderr.strip().splitlines()) == 1
    with running_emulator(api_key="the-right-key") as strict:
        refused = subprocess.run(
            [sys.executable, "-m", "dispatcher.cli", "poll", "--once"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "OPENAI_BASE_URL": strict.base_url, "OPENAI_API_KEY": "wrong"},
        )
    # A refused key is a setting to fix, not a failed pass: the poller refuses to start,
    # with one line naming the variable.
    assert refused.returncode == 2
    assert refused.stderr.startswith("toolfan: cannot start: OPENAI_API_KEY: ")
    assert "the API key was refused" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "wrong" not in refused.stderr


def _calls_of(redis_client, command: str) -> int:
    stats = redis_client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def test_the_workers_join_each_batch_with_toolfans_script(api, redis_client):
    """Each call's part goes through tasks.join's script, never Celery's (its SISMEMBER)."""
    seeded = seed(api, 4)
    calls = sum(len(actions) for actions in seeded.calls.values())
    celerys, ours = (
        _calls_of(redis_client, "sismember"),
        _calls_of(redis_client, "zremrangebyscore"),
    )
    poll_until(api, seeded)
    check_exactly_once(api, seeded, redis_client)
    assert _calls_of(redis_client, "sismember") == celerys  # Celery's script: one per part
    assert _calls_of(redis_client, "zremrangebyscore") - ours >= calls  # ours: one per part


def test_each_call_s_result_is_saved_and_counted_in_its_chord_by_one_script(api, redis_client):
    """The ledger's FINISH and the chord's JOIN reach Redis as one script, never apart.

    Watched with MONITOR (every client's commands, the test's database only): the workers
    run the combined script for every call of these sessions, and neither script alone.
    """
    merged = hashlib.sha1(finish_then(JOIN).encode()).hexdigest()
    alone = hashlib.sha1(FINISH.encode()).hexdigest()
    joined_alone = hashlib.sha1(JOIN.encode()).hexdigest()
    db = redis_client.connection_pool.connection_kwargs.get("db", 0)
    seen: Counter[str] = Counter()
    with redis_client.monitor() as monitor:
        stop = threading.Event()

        def watch() -> None:
            for command in monitor.listen():
                if stop.is_set():
                    return
                words = command["command"].split(" ", 2)
                if command.get("db") == db and words[0] in ("EVALSHA", "EVAL"):
                    seen[words[1]] += 1

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        seeded = seed(api, 3)
        calls = sum(len(actions) for actions in seeded.calls.values())
        poll_until(api, seeded)
        check_exactly_once(api, seeded, redis_client)
        stop.set()
        redis_client.ping()  # one more command, so that the watcher sees the stop
        watcher.join(10)
    assert seen[merged] >= calls, (calls, seen)  # more where a call's attempt was redone
    assert seen[alone] == seen[joined_alone] == 0, seen  # and the backend counts none again
