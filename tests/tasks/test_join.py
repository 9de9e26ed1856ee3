"""The join of toolfan's chords: once per chord, every result in order, in few commands.

Each test uses a Celery app of its own (toolfan's app class and configuration) on a
private redis-server (broker database 0, results 1). No worker runs: the tests hand the
result backend finished parts as a worker's tracer does, and read the callback's messages
off its queue, so the server's counters are the test's alone.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, states
from celery.app.task import Context
from celery.backends.redis import RedisBackend
from celery.canvas import Signature

from handlers.result import CallResult
from tasks.app import Toolfan
from tasks.join import (
    CLAIM_SECONDS,
    CLAIM_SUFFIX,
    DONE_SECONDS,
    JOIN,
    JoiningRedisBackend,
    counted,
    joinable,
)
from tasks.ledger import NOT_RUN, CallRef, Ledger
from tasks.publish import set_chord_size
from tasks.queues import EXECUTE_TASK
from tests.tasks.apps import private_app

CALLBACK_QUEUE = "test.join"


@pytest.fixture
def app() -> Iterator[Celery]:
    with private_app("join-test", Toolfan) as app:
        yield app


@pytest.fixture
def results(app: Celery) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(app.conf.result_backend)
    yield client
    client.close()


class Chord:
    """One chord's parts, handed to the backend as a worker would after each task."""

    def __init__(self, app: Celery, size: int, task: str = EXECUTE_TASK) -> None:
        self.app = app
        self.group = str(uuid.uuid4())
        self.task = task
        self.ids = [str(uuid.uuid4()) for _ in range(size)]
        callback = Signature(
            "toolfan.submit", options={"queue": CALLBACK_QUEUE, "task_id": str(uuid.uuid4())}
        )
        self.callback = dict(callback)
        set_chord_size(app.backend, self.group, size)

    def request(self, index: int, task_id: str | None = None) -> Context:
        return Context(
            task=self.task,
            id=task_id or self.ids[index],
            group=self.group,
            group_index=index,
            chord=self.callback,
            kwargs={"call": {"batch_id": f"sess_{self.group}", "call_id": f"call_{index}"}},
        )

    def part(self, index: int, value: Any = None, state: str = states.SUCCESS) -> None:
        value = {"call_id": f"call_{index}"} if value is None else value
        self.app.backend.on_chord_part_return(self.request(index), state, value)


def callbacks(app: Celery) -> list[list[Any]]:
    """The results each callback sent so far was given (its first argument), oldest first."""
    client = redis.Redis.from_url(app.conf.broker_url)
    try:
        messages = [json.loads(m) for m in reversed(client.lrange(CALLBACK_QUEUE, 0, -1))]
        client.delete(CALLBACK_QUEUE)
    finally:
        client.close()
    return [json.loads(base64.b64decode(m["body"]))[0][0] for m in messages]


def left(app: Celery, results: redis.Redis, chord: Chord) -> list[str]:
    """The chord's keys left in the backend: only the claim's marker, with its expiry."""
    claim = app.backend.get_key_for_group(chord.group, ".c")
    assert results.keys("*") == [claim]
    assert 0 < results.ttl(claim) <= DONE_SECONDS
    return [results.get(claim).decode()]


def test_a_part_that_finishes_before_the_size_is_written_is_counted(app):
    """Celery's canvas writes a chord's size as it sends the last part."""
    chord = Chord(app, 3)
    app.backend.client.delete(app.backend.get_key_for_group(chord.group, ".s"))
    chord.part(1)
    chord.part(0)
    set_chord_size(app.backend, chord.group, 3)
    chord.part(2)
    assert callbacks(app) == [[{"call_id": f"call_{i}"} for i in range(3)]]


def test_toolfans_app_joins_with_its_own_backend(app):
    assert type(app.backend) is JoiningRedisBackend
    plain = Toolfan("plain", set_as_current=False, backend="cache+memory://")
    assert not isinstance(plain.backend, RedisBackend)  # only Redis's backend is replaced
    plain.close()


def test_the_last_part_sends_one_callback_with_every_result_in_order(app, results):
    chord = Chord(app, 5)
    order = list(range(5))
    random.Random(3).shuffle(order)
    for index in order[:-1]:
        chord.part(index)
        assert callbacks(app) == []
    chord.part(order[-1])
    assert callbacks(app) == [[{"call_id": f"call_{i}"} for i in range(5)]]
    assert left(app, results, chord) == ["done"]  # no results, no size; the marker expires


def test_a_part_delivered_twice_counts_once(app, results):
    chord = Chord(app, 3)
    chord.part(0, {"call_id": "call_0", "copy": 1})
    chord.part(0, {"call_id": "call_0", "copy": 2})  # a redelivered message's result
    chord.part(1)
    assert callbacks(app) == []  # two parts of three, however often one came
    chord.part(2)
    (sent,) = callbacks(app)
    assert [r["call_id"] for r in sent] == ["call_0", "call_1", "call_2"]


def test_a_copy_arriving_after_the_callback_writes_nothing(app, results):
    chord = Chord(app, 2)
    chord.part(0)
    chord.part(1)
    assert len(callbacks(app)) == 1
    chord.part(1)
    chord.part(0)
    assert callbacks(app) == []
    assert left(app, results, chord) == ["done"]  # nothing recreated


def test_the_completing_part_delivered_again_sends_the_callback_no_other_does(app, results):
    """A worker that died between its last part's script and the callback's send."""
    chord = Chord(app, 2)
    chord.part(0)
    backend = app.backend
    keys = [backend.get_key_for_group(chord.group, s) for s in (".j", ".s", CLAIM_SUFFIX)]
    encoded = backend.encode([1, chord.ids[1], states.SUCCESS, {"call_id": "call_1"}])
    claimed = backend._script()(keys, [1, encoded, 60, chord.ids[1], CLAIM_SECONDS])
    assert len(claimed) == 2 and callbacks(app) == []  # the process dies here
    backend.on_chord_part_return(chord.request(0), states.SUCCESS, {"call_id": "call_0"})
    assert callbacks(app) == []  # another part's copy: the claim is not its own
    chord.part(1)  # the dead worker's message, delivered again
    assert callbacks(app) == [[{"call_id": "call_0"}, {"call_id": "call_1"}]]
    assert left(app, results, chord) == ["done"]


def test_a_failed_part_fails_the_chord_as_celerys_join_does(app, results, caplog):
    chord = Chord(app, 2)
    chord.part(0)
    with caplog.at_level(logging.ERROR, logger="toolfan.join"):
        chord.part(1, RuntimeError("hard time limit"), states.FAILURE)
    assert callbacks(app) == []
    (record,) = caplog.records
    assert f"batch_id=sess_{chord.group}" in record.getMessage()
    meta = app.backend.get_task_meta(chord.callback["options"]["task_id"])
    assert meta["status"] == states.FAILURE
    assert "hard time limit" in str(meta["result"])


def test_the_chords_of_other_tasks_keep_celerys_join(app, results):
    chord = Chord(app, 2, task="users.own_task")
    chord.part(0)
    assert results.exists(app.backend.get_key_for_group(chord.group, ".d"))  # Celery's set
    chord.part(1)
    assert callbacks(app) == [[{"call_id": "call_0"}, {"call_id": "call_1"}]]


@pytest.mark.parametrize("celerys", [(0, 1), (2,), (1,)])
def test_a_chord_joined_partly_by_celerys_code_completes_once(app, celerys):
    """A fleet half upgraded: some parts meet a worker that joins with Celery's script."""
    chord = Chord(app, 3)
    for index in range(3):
        if index in celerys:
            request = chord.request(index)
            RedisBackend.on_chord_part_return(
                app.backend, request, states.SUCCESS, {"call_id": f"call_{index}"}
            )
        else:
            chord.part(index)
    assert callbacks(app) == [[{"call_id": f"call_{i}"} for i in range(3)]]


def commands(client: redis.Redis) -> int:
    """Commands the server ran so far, those inside scripts included."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def test_a_chord_costs_less_than_half_the_commands_of_celerys_join(app, results):
    ours, celerys = Chord(app, 5), Chord(app, 5, task="users.own_task")
    warm = Chord(app, 1)
    warm.part(0)  # the script loaded, the connections open
    Chord(app, 1, task="users.own_task").part(0)
    callbacks(app)
    counted = []
    for chord in (ours, celerys):
        before = commands(results)
        for index in range(5):
            chord.part(index)
        counted.append(commands(results) - before - 1)  # less the INFO that counted
    assert len(callbacks(app)) == 2
    # Both publish the callback (two commands). Celery's: a script of 14 commands per part
    # (one more for the last), then a read of a saved group, the results read in a
    # transaction, a claim's script and the cleanup's: 79 here. Ours: a script of 6 per
    # part, the first part's EXPIRE, 2 more for the last, and the cleanup's DEL and SET: 37.
    assert counted[0] <= 37, counted
    assert counted[1] >= 2 * counted[0], counted


# Saving a part's result and counting it in one script (tasks.execute's saver).


def ledger_on(url: str) -> Ledger:
    return Ledger.from_url(url, 600, "agents")


def saved_and_counted(app: Celery, ledger: Ledger, chord: Chord, index: int) -> Any:
    """What ``execute`` does for a part whose result and chord share a Redis, as it saves."""
    request = chord.request(index)
    value = {"call_id": f"call_{index}"}
    keys, args = app.backend.join_of(request, states.SUCCESS, value)
    ref = CallRef(f"sess_{chord.group}", "turn", f"call_{index}")
    saved, members = ledger.finish_then(ref, CallResult.ok(f"out {index}"), JOIN, keys, args)
    assert saved == CallResult.ok(f"out {index}")
    assert members is not NOT_RUN
    counted(request, keys, members)
    return request


def test_a_part_saved_and_counted_in_one_script_is_not_counted_again(app, results):
    ledger = ledger_on(app.conf.result_backend)
    chord = Chord(app, 3)
    for index in (2, 0):
        request = saved_and_counted(app, ledger, chord, index)
        # The tracer then hands the backend the part, as after every task: not one command.
        before = commands(results)
        app.backend.on_chord_part_return(request, states.SUCCESS, {"call_id": f"call_{index}"})
        assert commands(results) == before
        assert callbacks(app) == []
    last = saved_and_counted(app, ledger, chord, 1)
    assert callbacks(app) == []  # the callback goes out after the task, as before
    app.backend.on_chord_part_return(last, states.SUCCESS, {"call_id": "call_1"})
    assert callbacks(app) == [[{"call_id": f"call_{i}"} for i in range(3)]]
    for index in range(3):
        ref = CallRef(f"sess_{chord.group}", "turn", f"call_{index}")
        assert ledger.saved(ref) == CallResult.ok(f"out {index}")


def test_saving_and_counting_a_part_is_one_round_trip(app, results):
    ledger = ledger_on(app.conf.result_backend)
    saved_and_counted(app, ledger, Chord(app, 2), 0)  # the script loaded
    chord = Chord(app, 2)
    before = results.info("commandstats")
    saved_and_counted(app, ledger, chord, 0)
    after = results.info("commandstats")
    scripts = after["cmdstat_evalsha"]["calls"] - before["cmdstat_evalsha"]["calls"]
    assert scripts == 1  # FINISH and JOIN were two
    calls = sum(v["calls"] for k, v in after.items()) - sum(v["calls"] for v in before.values())
    assert calls <= 12  # the INFO, the script, FINISH's 3 commands and JOIN's 6


def test_a_result_another_copy_saved_first_is_returned_and_not_counted(app, results):
    ledger = ledger_on(app.conf.result_backend)
    chord = Chord(app, 2)
    ref = CallRef(f"sess_{chord.group}", "turn", "call_0")
    ledger.finish(ref, CallResult.ok("the first copy's"))
    request = chord.request(0)
    keys, args = app.backend.join_of(request, states.SUCCESS, {"call_id": "call_0"})
    saved, members = ledger.finish_then(ref, CallResult.ok("this copy's"), JOIN, keys, args)
    assert (saved, members) == (CallResult.ok("the first copy's"), NOT_RUN)
    assert not results.exists(keys[0])  # the chord has not counted it
    # The task returns the saved result and the backend counts that one, as before.
    chord.part(0, {"call_id": "call_0", "output": "the first copy's"})
    chord.part(1)
    assert callbacks(app) == [
        [{"call_id": "call_0", "output": "the first copy's"}, {"call_id": "call_1"}]
    ]


def test_only_a_joined_chords_part_on_the_ledgers_own_redis_is_saved_and_counted_at_once(app):
    chord = Chord(app, 2)
    url = app.conf.result_backend
    assert joinable(app.backend, chord.request(0), ledger_on(url).client)
    other_db = url.rsplit("/", 1)[0] + "/2"
    assert not joinable(app.backend, chord.request(0), ledger_on(other_db).client)
    mine = Chord(app, 2, task="users.own_task")
    assert not joinable(app.backend, mine.request(0), ledger_on(url).client)
    alone = Context(task=EXECUTE_TASK, id=str(uuid.uuid4()), kwargs={})  # no chord
    assert not joinable(app.backend, alone, ledger_on(url).client)
    plain = Toolfan("plain", set_as_current=False, backend="cache+memory://")
    assert not joinable(plain.backend, chord.request(0), ledger_on(url).client)
    plain.close()
