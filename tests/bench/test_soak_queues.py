"""The soak's diagnostics of a slow stretch: queue depths each second, connections by process.

On a real Redis: the depths add a queue's priority lists up and count unacked messages,
ignoring kombu's bindings; the watch keeps reading in a thread of its own; connections are
told apart by the process tree that holds them; the report names the slowest windows with
their deepest queues.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
import redis

from bench.soak_queues import PRIORITY_SEP, QueueWatch, deepest, peaks, queue_depths
from bench.soak_report import connection_lines, slowest_lines
from bench.soak_sample import connections

pytestmark = pytest.mark.quick


def _port(client: redis.Redis) -> int:
    return int(client.connection_pool.connection_kwargs["port"])


def test_depths_add_up_priorities_count_unacked_and_skip_what_is_no_queue(
    redis_client: redis.Redis,
) -> None:
    redis_client.rpush("fn.lookup", *"abc")
    redis_client.rpush(f"fn.lookup{PRIORITY_SEP}3", *"de")
    redis_client.rpush("toolfan.submit", "x")
    redis_client.hset("unacked", mapping={"tag1": "m", "tag2": "m"})
    redis_client.zadd("unacked_index", {"tag1": 1.0, "tag2": 2.0})
    redis_client.sadd("_kombu.binding.fn.lookup", "route")
    redis_client.rpush("not-a-queue", "y")

    assert queue_depths(redis_client) == {"fn.lookup": 5, "toolfan.submit": 1, "unacked": 2}


def test_an_idle_broker_has_no_depths(redis_client: redis.Redis) -> None:
    assert queue_depths(redis_client) == {}


def test_the_watch_reads_each_second_until_stopped(redis_client: redis.Redis) -> None:
    zero = time.monotonic()
    watch = QueueWatch(os.environ["TOOLFAN_REDIS_URL"], zero, every=0.05)
    watch.start()
    try:
        redis_client.rpush("fn.slow", *range(7))
        deadline = time.monotonic() + 5
        while not any(p["depths"].get("fn.slow") == 7 for p in watch.snapshot()):
            assert time.monotonic() < deadline, watch.snapshot()[-3:]
            time.sleep(0.02)
        redis_client.delete("fn.slow")
        while watch.snapshot()[-1]["depths"]:
            assert time.monotonic() < deadline, watch.snapshot()[-3:]
            time.sleep(0.02)
    finally:
        watch.stop()
    stopped = len(watch.snapshot())
    time.sleep(0.2)
    assert len(watch.snapshot()) == stopped and watch.errors == 0
    times = [p["t"] for p in watch.points]
    assert times == sorted(times) and 0 <= times[0] < times[-1]


def test_peaks_keep_each_queues_deepest_reading_inside_the_window() -> None:
    points = [
        {"t": 1.0, "depths": {"fn.a": 9}},
        {"t": 2.0, "depths": {"fn.a": 3, "toolfan.submit": 4}},
        {"t": 3.0, "depths": {"fn.a": 5}},
        {"t": 4.0, "depths": {"fn.b": 50}},
    ]
    assert peaks(points, 1.0, 3.0) == {"fn.a": 5, "toolfan.submit": 4}
    assert deepest(peaks(points, 0.0, 4.0), 2) == "fn.b 50, fn.a 9"
    assert deepest({}) == "-"


def test_connections_are_counted_by_the_process_that_holds_them(
    redis_client: redis.Redis,
) -> None:
    port, me = _port(redis_client), os.getpid()
    before = connections({"bench": me}, port)["bench"]
    extra = [redis.Redis(port=port, host="127.0.0.1") for _ in range(3)]
    try:
        for client in extra:
            client.ping()
        assert connections({"bench": me}, port)["bench"] == before + 3
        assert connections({"gone": 2**22 + 1}, port) == {"gone": 0}
        assert connections({}, port, {"alone": me}) == {"alone": before + 3}
    finally:
        for client in extra:
            client.close()


def _soak(queues: list[dict[str, Any]]) -> dict[str, Any]:
    windows = [
        {"start": 0.0, "end": 60.0, "sessions": 10, "p95": 0.2},
        {"start": 60.0, "end": 120.0, "sessions": 10, "p95": 4.0},
        {"start": 120.0, "end": 180.0, "sessions": 0, "p95": float("nan")},
    ]
    series = [
        {"t": 10.0, "connections": {"worker-threads": 20, "poller": 3}},
        {"t": 70.0, "connections": {"worker-threads": 64, "poller": 3}},
        {"t": 130.0, "connections": {"worker-threads": 60, "poller": 4}},
    ]
    return {"windows": windows, "series": series, "queues": queues, "config": {"warmup": 0.0}}


def test_the_report_names_the_slowest_window_first_with_its_deepest_queues() -> None:
    soak = _soak([{"t": 30.0, "depths": {"fn.a": 2}}, {"t": 90.0, "depths": {"fn.a": 800}}])
    lines = slowest_lines(soak)
    assert "60 s  p95  4.000 s  fn.a 800" in lines[2]
    assert "0 s  p95  0.200 s  fn.a 2" in lines[3] and len(lines) == 4
    table = connection_lines(soak)
    assert table[2].split() == ["poller", "3", "4", "4"]
    assert table[3].split() == ["worker-threads", "20", "60", "64"]


def test_a_soak_without_the_readings_reports_no_such_lines() -> None:
    soak = _soak([])
    assert slowest_lines(soak) == []
    for sample in soak["series"]:
        del sample["connections"]
    assert connection_lines(soak) == []


def test_a_tree_counts_its_childrens_connections_and_a_process_alone_does_not(
    redis_client: redis.Redis,
) -> None:
    port, me = _port(redis_client), os.getpid()
    holder = (
        "import sys, redis\n"
        f"held = [redis.Redis(host='127.0.0.1', port={port}) for _ in range(2)]\n"
        "[c.ping() for c in held]\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        counted = connections({"tree": me}, port, {"alone": me})
        assert counted["tree"] - counted["alone"] == 2
        assert connections({"child": child.pid}, port) == {"child": 2}
    finally:
        child.communicate("", timeout=10)
