"""Smoke test of ``python -m bench --quick``: it runs end to end and its figures are sane.

Never that the machine is fast: only that every figure exists, is finite and positive,
that every call is accounted for, and that the targets are evaluated. The bench runs on
its own Redis databases (4 and 5), apart from the suite's 8 to 15.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.services import ROOT

SYSTEMS = ("toolfan", "raw_celery", "threads", "loop")
QUICK_IDLE = 500


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_CURRENT_TEST", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {
        "json": json.loads((out / "bench.json").read_text()),
        "stdout": done.stdout,
        "out": out,
        "seconds": time.monotonic() - started,
    }


@pytest.mark.timeout(180)
def test_every_workload_and_system_is_measured_and_sane(bench: dict[str, Any]) -> None:
    workloads = bench["json"]["workloads"]
    assert set(workloads) == {"noop", "io"}
    for name, by_system in workloads.items():
        assert set(by_system) == set(SYSTEMS), name
        for system, m in by_system.items():
            where = f"{name}/{system}"
            for key in ("calls_per_s", "sessions_per_s", "seconds", "cpu_seconds_per_call"):
                assert _positive(m[key]), (where, key, m[key])
            p = m["latency"]
            assert _positive(p["p50"]) and p["p50"] <= p["p95"] <= p["p99"], (where, p)
            assert m["calls"] == m["sessions"] * bench["json"]["info"]["workloads"][name]["calls"]
            if system in ("toolfan", "raw_celery"):
                assert _positive(m["redis_commands_per_call"]), where
        toolfan = by_system["toolfan"]
        assert _positive(toolfan["api_requests_per_poll"])
        extra = toolfan["extra"]
        assert extra["batches"] == extra["sessions_answered"] == toolfan["sessions"]
        assert extra["events"] == toolfan["calls"] and extra["failed_events"] == 0
        assert by_system["raw_celery"]["extra"]["results"] == by_system["raw_celery"]["calls"]
        for system in ("threads", "loop"):
            assert by_system[system]["extra"]["events"] == by_system[system]["calls"]


@pytest.mark.timeout(180)
def test_every_throughput_is_repeated_and_the_table_shows_the_median(bench: dict[str, Any]) -> None:
    data = bench["json"]
    reps = data["info"]["reps"]
    assert reps == 2
    for name, runs in data["spread"].items():
        for system in SYSTEMS:
            assert len(runs[system]) == reps and all(_positive(v) for v in runs[system])
            shown = data["workloads"][name][system]["calls_per_s"]
            assert shown == sorted(runs[system])[(reps - 1) // 2], (name, system)
        assert len(runs["toolfan_vs_raw_celery"]) == reps
    assert "calls/s per repetition" in bench["stdout"]


def test_the_workers_run_with_toolfan_workers_defaults(bench: dict[str, Any]) -> None:
    noop = bench["json"]["info"]["workloads"]["noop"]
    assert noop["pool"] is None and noop["concurrency"] is None
    log = (bench["out"] / "logs" / "worker-noop0.log").read_text()
    assert "prefork" in log and "fn.bench_noop" in log and "toolfan.poll" in log


@pytest.mark.timeout(180)
def test_ratios_idle_pass_and_half_load(bench: dict[str, Any]) -> None:
    data = bench["json"]
    for name, ratios in data["ratios"].items():
        for key in ("throughput_vs_raw_celery", "throughput_vs_loop", "redis_vs_raw_celery"):
            assert _positive(ratios[key]), (name, key)
    idle = data["idle"]
    assert idle["sessions"] == QUICK_IDLE
    assert idle["list_requests"] == [math.ceil(QUICK_IDLE / 100)] * idle["passes"]
    assert idle["sessions_seen"] == [QUICK_IDLE] * idle["passes"]
    assert all(_positive(c) for c in idle["cpu_seconds"])
    half = data["half_load"]
    assert half["batches"] == half["sessions"] >= 1
    assert _positive(half["latency"]["p95"]) and _positive(half["rate_calls_per_s"])
    push = data["push_load"]
    assert push["batches"] == push["sessions"] == push["pushed"] >= 1
    assert _positive(push["latency"]["p95"]) and _positive(push["seed_to_answer"]["p95"])
    # The two parts of the push latency (the push path's, the engine's) add up to it.
    path, engine = push["push_to_retrieve"], push["retrieve_to_accepted"]
    assert _positive(path["p50"]) and _positive(engine["p50"])
    assert path["p50"] < push["latency"]["p50"] and engine["p50"] < push["latency"]["p50"]


@pytest.mark.timeout(180)
def test_targets_are_printed_and_files_written(bench: dict[str, Any]) -> None:
    targets = bench["json"]["targets"]
    assert len(targets) == 11
    assert all(isinstance(t["passed"], bool) and t["measured"] is not None for t in targets)
    verdicts = [line for line in bench["stdout"].splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == len(targets)
    assert (bench["out"] / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "calls/s" in (bench["out"] / "bench.txt").read_text()
    print(f"python -m bench --quick took {bench['seconds']:.1f} s")
