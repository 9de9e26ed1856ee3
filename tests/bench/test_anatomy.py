"""``python -m bench anatomy``: every part weighed, and another bench's database left alone."""

from __future__ import annotations

import logging
import math
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.anatomy import PARTS, RUNNER, RUNNER_INSTEAD, WHOLE
from bench.stack import OWNER_KEY
from tests.bench.runs import run_bench
from tests.services import ROOT

#: The suite's results database, flushed for every test anyway (as in test_owner.py).
DB = "15"


def _url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}"


@pytest.fixture(scope="module")
def anatomy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("anatomy")
    sizes = ["--calls", "50", "--rounds", "2", "--inside-calls", "20", "--inside-pairs", "2"]
    threads = ["--threads", "4", "--threads-seconds", "0.3"]
    ran = run_bench(["anatomy", *sizes, *threads], out, "anatomy.json", 150)
    return {**ran, "text": (out / "anatomy.txt").read_text()}


@pytest.mark.timeout(160)
def test_every_part_and_body_is_weighed_and_the_rest_is_what_they_leave(
    anatomy: dict[str, Any],
) -> None:
    doc = anatomy["json"]
    figures = doc["figures"]
    assert set(figures) == {name for name, _ in PARTS} | set(WHOLE) | {RUNNER}
    for name, figure in figures.items():
        assert len(figure["rounds"]) == 2, name
        assert all(math.isfinite(v) and v > 0 for v in figure["rounds"]), name
        assert min(figure["rounds"]) <= figure["us"] <= max(figure["rounds"]), name
    body = figures["execute"]["us"]
    assert doc["parts_us"] == pytest.approx(sum(figures[n]["us"] for n, _ in PARTS))
    assert doc["rest_us"] == pytest.approx(body - doc["parts_us"])
    assert doc["execute_vs_floor_call"] == pytest.approx(body / figures["floor_call"]["us"])
    for name, _ in PARTS:
        assert f"  {name} " in anatomy["text"], name
    assert "execute body" in anatomy["text"]


@pytest.mark.timeout(160)
def test_every_part_is_weighed_inside_the_whole_too(anatomy: dict[str, Any]) -> None:
    doc = anatomy["json"]
    inside = doc["inside"]
    assert set(inside) == {name for name, _ in PARTS} | {RUNNER_INSTEAD}
    for name, figure in inside.items():
        assert len(figure["with"]) == len(figure["without"]) == 2, name
        assert all(v > 0 for v in figure["with"] + figure["without"]), name
        differences = [a - b for a, b in zip(figure["with"], figure["without"], strict=True)]
        assert figure["us"] == pytest.approx(statistics.median(differences)), name
    parts = sum(inside[name]["us"] for name, _ in PARTS)
    assert doc["inside_parts_us"] == pytest.approx(parts)
    assert "(runner thread)" in anatomy["text"]
    body = doc["figures"]["execute"]["us"]
    assert doc["inside_rest_us"] == pytest.approx(body - doc["inside_parts_us"])
    assert "inside" in anatomy["text"]


@pytest.mark.timeout(160)
def test_every_part_is_weighed_with_the_threads_calling_too(anatomy: dict[str, Any]) -> None:
    threads = anatomy["json"]["threads"]
    assert (threads["threads"], threads["tool"], threads["pairs"]) == (4, "bench_io", 2)
    assert set(threads["parts"]) == {name for name, _ in PARTS}
    for name, figure in threads["parts"].items():
        assert len(figure["with"]) == len(figure["without"]) == 2, name
        assert all(v > 0 for v in figure["with"] + figure["without"]), name
        differences = [a - b for a, b in zip(figure["with"], figure["without"], strict=True)]
        assert figure["us"] == pytest.approx(statistics.median(differences)), name
        assert figure["calls_per_s_without_vs_with"] > 0, name
    assert threads["body_us"] > 0 and threads["calls_per_s"] > 0
    assert threads["parts_us"] == pytest.approx(sum(f["us"] for f in threads["parts"].values()))
    assert threads["rest_us"] == pytest.approx(threads["body_us"] - threads["parts_us"])
    assert "with 4 threads calling bench_io at once" in anatomy["text"]


def _anatomy(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m bench anatomy`` with ``args``, in a bare environment, writing to ``out``."""
    return subprocess.run(
        [sys.executable, "-m", "bench", "anatomy", *args, "--out", str(out)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--threads", "-1"],
        ["--threads", "1025"],  # a thread each, and a Redis connection each: a typo's count
        ["--threads", "4", "--threads-seconds", "0"],
        ["--threads", "4", "--threads-seconds", "nan"],
        ["--threads", "4", "--threads-seconds", "inf"],
    ],
)
def test_bad_threads_options_are_refused_before_anything_runs(
    args: list[str], tmp_path: Path
) -> None:
    done = _anatomy(args, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--threads must be 0 to 1024 and --threads-seconds positive" in done.stderr
    assert not (tmp_path / "anatomy.json").exists()


def test_each_switch_takes_its_part_out_of_execute_and_puts_it_back(
    redis_client: redis.Redis,
) -> None:
    from bench.anatomy import switches
    from bench.tools import bench_noop
    from handlers import runner
    from handlers.result import CallResult
    from tasks import execute, metrics
    from tasks.envelope import Envelope
    from tasks.ledger import CallRef, Ledger

    ledger = Ledger(redis_client, ttl=60, source="agents")
    envelope = Envelope("agents", "sess_1", "call_1", bench_noop.name, "{}", "turn_1")
    ref, line = CallRef("sess_1", "turn_1", "call_1"), logging.getLogger("toolfan.execute")
    real = (runner._with_timeout, execute.parse_arguments, execute.context_of, line.level)
    off = switches(ledger, bench_noop, envelope)
    assert set(off) == {name for name, _ in PARTS}
    for switch in off.values():
        switch(False)
    try:
        begun, result = ledger.begin(ref, bench_noop.name), CallResult.ok("x")
        assert (begun.saved, begun.attempts) == (None, 1)
        assert ledger.finish(ref, result) is result
        assert redis_client.dbsize() == 0  # neither script ran
        assert runner._with_timeout(threading.current_thread, 1.0, False) is (
            threading.current_thread()
        )
        assert execute.parse_arguments(bench_noop, "not even JSON", {}) is (
            execute.parse_arguments(bench_noop, "{}", {})
        )
        assert execute.context_of(envelope, 3).attempt == 1
        assert execute.metrics is not metrics
        assert not line.isEnabledFor(logging.INFO)
    finally:
        for switch in off.values():
            switch(True)
    assert (runner._with_timeout, execute.parse_arguments, execute.context_of, line.level) == real
    assert execute.metrics is metrics
    assert ledger.begin(ref, bench_noop.name).attempts == 1
    assert redis_client.dbsize() == 1  # the real begin wrote the call's record


@pytest.mark.timeout(60)
def test_it_stops_on_a_database_another_bench_holds_and_flushes_nothing(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    target = redis.Redis.from_url(f"{_url(redis_client)}/{DB}")
    target.set(OWNER_KEY, "pid 1 on elsewhere", ex=60)
    target.set("their:record", "kept")
    try:
        where = ["--redis-url", f"{_url(redis_client)}/0", "--ledger-db", DB]
        done = _anatomy([*where, "--calls", "5", "--rounds", "1"], tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert "another bench (pid 1 on elsewhere)" in done.stderr
        assert target.get("their:record") == b"kept"
        assert target.get(OWNER_KEY) == b"pid 1 on elsewhere"
        assert not (tmp_path / "anatomy.json").exists()
    finally:
        target.delete(OWNER_KEY, "their:record")
        target.close()
