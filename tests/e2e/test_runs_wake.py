"""A looping runs poller reads a newly watched run at once, not at its next pass.

On a stack of its own (every runs stack owns databases 12 and 13, so it starts only once
the shared stack of ``test_assistants.py`` has stopped), with ``--interval 60``: without
the bell of :mod:`dispatcher.wake` a watched run would wait up to a minute for its read.
"""

from __future__ import annotations

import signal
import time
import uuid
from typing import ClassVar

import pytest
import redis

from dispatcher.errors import APIError
from dispatcher.sources.assistants_client import AssistantsClient
from dispatcher.sources.assistants_models import Run
from dispatcher.sources.assistants_watch import Watches
from dispatcher.wake import WAKE
from tests.e2e.runs_stack import RunsStack
from tests.e2e.test_assistants import call, outputs, watch
from tests.services import wait_for

#: The poller's interval: far longer than any wait below.
INTERVAL = "60"
#: Seconds a watched run may take to be answered (a CLI start, a read, a call, a submit).
ANSWERED_WITHIN = 15


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    with RunsStack(tmp_path_factory.mktemp("wake"), interval=INTERVAL) as running:
        yield running


def _answered(stack: RunsStack, run: dict) -> list[list[tuple[str, str]]]:
    return wait_for(
        lambda: outputs(stack.state, run), ANSWERED_WITHIN, f"run {run['id']}'s submit", 0.1
    )


def _listeners(client: redis.Redis) -> int:
    return int(client.pubsub_numsub(WAKE)[0][1])


def test_a_run_watched_between_passes_is_answered_long_before_the_next_pass(stack):
    assert stack.poller is not None
    run = stack.state.create_run([[call("add", {"a": 2, "b": 3})]])
    started = time.monotonic()
    watch(stack, run)
    assert [o for phase in _answered(stack, run) for _, o in phase] == ["5"]
    assert time.monotonic() - started < ANSWERED_WITHIN < float(INTERVAL)
    log = stack.poller.log()
    assert "runs (newly watched): 1 runs seen, 1 waiting; 1 calls dispatched" in log
    assert log.count("runs: ") == 1  # one full pass, at the start: the run was not its work


def test_a_wake_reads_only_the_runs_this_poller_has_not_read(stack):
    # Without rests (TOOLFAN_RUNS_RECHECK=0) a full pass reads every watched run; a wake's
    # pass reads the new one alone, whatever else is watched.
    poller = stack.runs_poller(runs_recheck=0)

    def slow_run() -> dict:
        return stack.state.create_run(
            [[call("slow_count", {"key": uuid.uuid4().hex, "seconds": 4})]]
        )

    watch(stack, slow_run(), slow_run())
    assert poller.poll_new().runs_seen >= 2  # and what earlier tests left watched
    watch(stack, slow_run())
    woken = poller.poll_new()
    assert woken.runs_seen == 1
    assert woken.line().startswith("runs (newly watched): 1 runs seen")
    watched = len(poller.watches.all())
    assert watched >= 3  # the others still watched, and not read
    assert poller.poll_once().runs_seen == watched


class _Refusing(AssistantsClient):
    """The real client, but the API refuses every read of the runs named ``refused_*``."""

    tries: ClassVar[list[str]] = []

    def retrieve_run(self, thread_id: str, run_id: str) -> Run:
        if run_id.startswith("refused_"):
            self.tries.append(run_id)
            raise APIError("the API refused the read", status_code=403)
        return super().retrieve_run(thread_id, run_id)


def test_a_run_whose_read_failed_is_not_read_again_on_every_wake(stack, redis_client, monkeypatch):
    # Each wake's pass reads the runs not read yet: a run the API refused was read again on
    # every wake, up to twenty times a second while watches stream in. It waits for the
    # next full pass, as a run read successfully does. Watches of its own, out of the
    # stack's poller's sight; runs that stay in a model turn, so nothing is dispatched.
    # The poller's settings are the defaults.
    poller = stack.runs_poller(_Refusing, ledger_client=redis_client)
    monkeypatch.setattr(stack.state, "turn_duration", 60.0)
    monkeypatch.setattr(_Refusing, "tries", [])
    refused = stack.state.create_run(status="in_progress", run_id=f"refused_{uuid.uuid4().hex}")
    poller.watches.add([(refused["thread_id"], refused["id"])])
    assert poller.poll_new().errors == 1
    for _ in range(5):  # five more wakes, each for a new run
        run = stack.state.create_run(status="in_progress")
        poller.watches.add([(run["thread_id"], run["id"])])
        woken = poller.poll_new()
        assert (woken.runs_seen, woken.errors) == (1, 0)
    assert _Refusing.tries == [refused["id"]]
    assert poller.poll_once().errors == 1  # the next full pass tries it again
    assert _Refusing.tries == [refused["id"]] * 2


def test_a_stream_of_watches_is_read_in_a_few_passes_not_one_pass_a_watch(stack):
    # 100 watches 5 ms apart (half a second) ring the bell 100 times; each woken pass reads
    # the whole watch list, so the loop leaves 50 ms between them: about ten passes.
    assert stack.poller is not None
    client = stack.redis()
    before = stack.poller.log().count("runs (newly watched):")
    for i in range(100):
        Watches(client).add([(f"thread_stream_{i}", f"run_{i}")])  # no such run: dropped
        time.sleep(0.005)
    time.sleep(0.5)
    woken = stack.poller.log().count("runs (newly watched):") - before
    assert 1 <= woken <= 20, woken

    def streamed() -> list[str]:
        return [w.run_id for w in Watches(client).all() if w.thread_id.startswith("thread_st")]

    wait_for(lambda: not streamed(), 10, "the unknown runs to be dropped", 0.1)


def test_the_listener_comes_back_after_its_connection_is_killed(stack):
    client = stack.redis()
    assert _listeners(client) == 1
    ours = [
        c["id"]
        for c in client.client_list(_type="pubsub")
        if c.get("db") == str(client.connection_pool.connection_kwargs.get("db", 0))
    ]
    assert ours
    for client_id in ours:
        client.client_kill_filter(_id=client_id)
    wait_for(lambda: _listeners(client) == 1, 20, "the bell to listen again", 0.1)
    run = stack.state.create_run([[call("add", {"a": 20, "b": 22})]])
    watch(stack, run)
    assert [o for phase in _answered(stack, run) for _, o in phase] == ["42"]


def test_a_poller_waiting_for_its_bell_stops_at_once_on_sigterm(stack):
    assert stack.poller is not None
    stopped_at = time.monotonic()
    stack.poller.proc.send_signal(signal.SIGTERM)
    stack.poller.proc.wait(10)
    assert time.monotonic() - stopped_at < 3
    assert "poll: stopped" in stack.poller.log()
    assert _listeners(stack.redis()) == 0
