"""The ledger upgrade: legacy keys move once, keep their TTL, and never overwrite."""

from __future__ import annotations

import threading
import time

from tasks import keys
from tasks.upgrade import LOCK, upgrade_ledger


def test_legacy_keys_move_with_their_ttl_and_the_ledger_remembers(redis_client):
    redis_client.hset("toolfan:call:{s%3A1}:t:c", mapping={"state": "done"})
    redis_client.expire("toolfan:call:{s%3A1}:t:c", 500)
    redis_client.hset("toolfan:dispatch:{s%3A1}", mapping={"token": "x"})
    redis_client.set("toolfan:claim:{s%3A1}", "x", px=9000)
    redis_client.set("toolfan:workers:unrelated", "1")  # not a batch key: left alone
    assert upgrade_ledger(redis_client) == 3
    moved = keys.call("agents", "s:1", "t", "c")
    assert redis_client.hget(moved, "state") == "done"
    assert 0 < redis_client.ttl(moved) <= 500
    assert 0 < redis_client.pttl(keys.claim("agents", "s:1")) <= 9000
    assert redis_client.hget(keys.dispatch("agents", "s:1"), "token") == "x"
    assert not redis_client.exists("toolfan:call:{s%3A1}:t:c")
    assert redis_client.get("toolfan:workers:unrelated") == "1"
    assert redis_client.get(keys.SCHEMA) == keys.VERSION


def test_once_upgraded_a_start_costs_no_scan(redis_client):
    assert upgrade_ledger(redis_client) == 0
    redis_client.hset("toolfan:call:{late}:t:c", mapping={"state": "done"})
    assert upgrade_ledger(redis_client) == 0  # the marker says done: one GET, no SCAN
    assert upgrade_ledger(redis_client, force=True) == 1


def test_a_record_the_new_layout_holds_is_never_overwritten(redis_client):
    redis_client.hset(keys.call("agents", "s", "t", "c"), mapping={"state": "submitted"})
    redis_client.hset("toolfan:call:{s}:t:c", mapping={"state": "started"})
    assert upgrade_ledger(redis_client) == 0
    assert redis_client.hget(keys.call("agents", "s", "t", "c"), "state") == "submitted"
    assert not redis_client.exists("toolfan:call:{s}:t:c")


def test_a_second_process_waits_for_the_one_upgrading(redis_client):
    redis_client.set(LOCK, "other", px=60_000)

    def finish() -> None:
        time.sleep(0.6)
        redis_client.set(keys.SCHEMA, keys.VERSION)
        redis_client.delete(LOCK)

    threading.Thread(target=finish).start()
    started = time.monotonic()
    assert upgrade_ledger(redis_client) is None
    assert time.monotonic() - started >= 0.5
