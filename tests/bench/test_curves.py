"""Smoke test of ``python -m bench curves --quick``: every curve drawn, every call accounted.

Never that the machine is fast: only that each curve has its points, each point both
systems' figures (finite and positive), every call answered exactly once, and that the
JSON, the tables and the PNG are written. It runs on the bench's databases (4 and 5).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.bench.runs import run_bench

CURVES = ("calls_per_batch", "in_flight", "worker_processes")
SYSTEMS = ("toolfan", "raw_celery")


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def curves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("curves")
    ran = run_bench(["curves", "--quick"], out, "curves.json", 150)
    return {**ran, "text": (out / "curves.txt").read_text()}


@pytest.mark.timeout(160)
def test_every_curve_has_its_points_with_both_systems_sane(curves: dict[str, Any]) -> None:
    data = curves["json"]["curves"]
    assert set(data) == set(CURVES)
    for name, curve in data.items():
        points = curve["points"]
        assert len(points) == 2, name
        assert [p["x"] for p in points] == sorted({p["x"] for p in points}), name
        for point in points:
            where = f"{name}={point['x']}"
            for system in SYSTEMS:
                figures = point[system]
                assert _positive(figures["calls_per_s"]), (where, system)
                assert _positive(figures["cpu_ms_per_call"]), (where, system)
                p = figures["latency"]
                assert _positive(p["p50"]) and p["p50"] <= p["p95"] <= p["p99"], (where, p)
                assert len(figures["calls_per_s_per_run"]) == point["runs"], where
                assert all(_positive(v) for v in figures["calls_per_s_per_run"]), where
            assert _positive(point["throughput_vs_raw_celery"]), where
            assert _positive(point["p95_vs_raw_celery"]), where


@pytest.mark.timeout(160)
def test_every_call_is_answered_exactly_once(curves: dict[str, Any]) -> None:
    for name, curve in curves["json"]["curves"].items():
        for point in curve["points"]:
            where = f"{name}={point['x']}"
            runs = point["runs"]
            toolfan, raw = point["toolfan"], point["raw_celery"]
            sessions, calls = point["sessions"] * runs, point["sessions"] * point["calls"] * runs
            assert toolfan["sessions"] == raw["sessions"] == sessions, where
            assert toolfan["calls"] == raw["calls"] == calls, where
            answered = toolfan["answered"]
            assert answered["batches"] == answered["sessions_answered"] == sessions, where
            assert answered["events"] == calls and answered["failed_events"] == 0, where
            assert raw["answered"]["results"] == calls, where


@pytest.mark.timeout(160)
def test_the_points_vary_what_their_curve_says(curves: dict[str, Any]) -> None:
    data = curves["json"]["curves"]
    assert [p["calls"] for p in data["calls_per_batch"]["points"]] == [1, 4]
    assert [p["sessions"] for p in data["in_flight"]["points"]] == [1, 4]
    assert [p["concurrency"] for p in data["worker_processes"]["points"]] == [1, 2]
    log = (curves["out"] / "logs-curves" / "worker-proc20.log").read_text()
    assert "concurrency: 2 (prefork)" in log


@pytest.mark.timeout(160)
def test_redis_memory_per_saved_call_is_weighed_for_both(curves: dict[str, Any]) -> None:
    for point in curves["json"]["curves"]["calls_per_batch"]["points"]:
        memory = point["memory"]
        for system in SYSTEMS:
            held = memory[system]
            assert math.isfinite(held["bytes_per_call"]), (point["x"], system)
            assert _positive(held["key_bytes_per_call"]) and _positive(held["keys_per_call"])
            assert held["held"] and all(_positive(row["bytes"]) for row in held["held"])
        patterns = {row["pattern"] for row in memory["toolfan"]["held"]}
        assert any(p.startswith("toolfan:") for p in patterns), patterns
        raw = {row["pattern"] for row in memory["raw_celery"]["held"]}
        assert any(p.startswith("celery-task-meta-") for p in raw), raw
        assert not any(p.startswith("bench:") for p in patterns | raw)


@pytest.mark.timeout(160)
def test_tables_and_picture_are_written(curves: dict[str, Any]) -> None:
    text = curves["text"]
    for title in ("calls per batch:", "batches in flight:", "worker processes:"):
        assert title in text
    assert "Redis memory per saved call" in text and "fit, toolfan:" in text
    assert text.count("ratio") >= 4
    png = (curves["out"] / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    print(f"python -m bench curves --quick took {curves['seconds']:.1f} s")


def test_a_points_cpu_is_pooled_over_its_runs_not_the_median_runs() -> None:
    """The kernel charges CPU by the tick: a run of four calls may read 0 ms on its own.

    This failed the quick curves now and then when the median run of a one-batch point
    was such a run; pooled over the point's runs, its CPU is their sum over their calls.
    """
    from bench.curves import pooled_cpu, summary
    from bench.figures import Measurement

    def run(calls_per_s: float, cpu_ms: float | None) -> Measurement:
        cpu = None if cpu_ms is None else cpu_ms / 1000
        return Measurement("toolfan", "flight1", 1, 4, 4 / calls_per_s, {}, 30.0, cpu)

    runs = [run(290, 5.0), run(300, 0.0), run(310, 2.5)]  # the median rate read 0 ms
    assert summary(runs)["cpu_ms_per_call"] == pytest.approx(2.5)
    assert pooled_cpu([run(300, 1.0), run(300, None)]) is None
