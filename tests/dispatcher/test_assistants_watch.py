"""The watched runs as a poller reads them, every pass, from the ledger's Redis."""

from __future__ import annotations

import json

import pytest
import redis

from dispatcher.sources import assistants_watch
from dispatcher.sources.assistants import batch_id
from dispatcher.sources.assistants_watch import WATCHES, Watch, Watches
from dispatcher.wake import Bell


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fields parsed, in order (the module's parser, counted)."""
    seen: list[str] = []
    parse = assistants_watch._watch

    def counted(key: str, value: str) -> Watch | None:
        seen.append(key)
        return parse(key, value)

    monkeypatch.setattr(assistants_watch, "_watch", counted)
    return seen


def test_a_pass_parses_only_the_watches_that_changed_since_the_last(
    redis_client: redis.Redis, parses: list[str]
) -> None:
    watches = Watches(redis_client)
    watches.add([("thread_1", "run_1"), ("thread/2", "run:2"), ("thread_3", "run_3")])
    first = watches.all()
    assert len(parses) == 3
    assert watches.all() == first and len(parses) == 3  # nothing changed: nothing parsed

    watches.record([(first[0], "requires_action")], [batch_id("thread_3", "run_3")])
    watches.add([("thread_4", "run_4")])
    now = watches.all()
    assert sorted(parses[3:]) == sorted([first[0].batch_id, batch_id("thread_4", "run_4")])
    assert {(w.thread_id, w.status) for w in now} == {
        ("thread_1", "requires_action"),
        ("thread/2", None),
        ("thread_4", None),
    }
    assert now[-1].thread_id == "thread_4"  # oldest first


def test_a_field_no_run_could_have_written_is_skipped_on_every_pass(
    redis_client: redis.Redis,
) -> None:
    watches = Watches(redis_client)
    watches.add([("thread_1", "run_1")])
    redis_client.hset(WATCHES, mapping={"not json": "{}", '["t", "r"]': "[not json"})
    for _ in range(2):
        assert [(w.thread_id, w.run_id) for w in watches.all()] == [("thread_1", "run_1")]


@pytest.mark.parametrize("ids", [("thread_1", "run_1"), ('th"{r}:1', "run/\u00e9\ud800")])
def test_a_watch_names_its_batch_as_the_source_does(ids: tuple[str, str]) -> None:
    watch = Watch(*ids, since=1.0)
    assert watch.batch_id == batch_id(*ids) == json.dumps(list(ids))


def test_a_watch_that_adds_runs_rings_the_looping_pollers_and_a_repeat_does_not(
    redis_client: redis.Redis,
) -> None:
    bell = Bell(redis_client).start()
    try:
        assert bell.subscribed(10)
        watches = Watches(redis_client)
        assert watches.add([("thread_1", "run_1"), ("thread_2", "run_2")]) == 2
        assert bell.wait(10)
        assert watches.add([("thread_1", "run_1")]) == 0  # watched already: nothing new to read
        assert not bell.wait(0.5)
        assert watches.add([("thread_1", "run_1"), ("thread_3", "run_3")]) == 1
        assert bell.wait(10)
    finally:
        bell.close()


def test_a_watch_is_saved_even_when_the_bell_cannot_be_rung(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: object) -> int:
        raise redis.ConnectionError("publish refused")

    monkeypatch.setattr(redis_client, "publish", refused)
    assert Watches(redis_client).add([("thread_1", "run_1")]) == 1
    assert [w.run_id for w in Watches(redis_client).all()] == ["run_1"]
