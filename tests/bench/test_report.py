"""The report's throughput targets say how far the floor, the least any implementation does, got."""

from __future__ import annotations

import pytest

from bench.figures import ASSISTANTS, FLOOR, RAW, RUNS_FLOOR, TOOLFAN, Measurement
from bench.report import Report

pytestmark = pytest.mark.quick


def _row(system: str, calls_per_s: float) -> Measurement:
    return Measurement(system, "noop", 100, 500, 500 / calls_per_s, {}, 1.0, 0.002)


def _report(floor: float, runs_floor: float) -> Report:
    rows = {RAW: 1000.0, TOOLFAN: 880.0, FLOOR: floor, ASSISTANTS: 700.0, RUNS_FLOOR: runs_floor}
    return Report(
        results={"noop": {system: _row(system, rate) for system, rate in rows.items()}},
        spread={"noop": {f"{FLOOR}_vs_{RAW}": [0.93, 0.95], f"{RUNS_FLOOR}_vs_{RAW}": [0.7]}},
    )


def _detail(report: Report, name: str) -> str:
    return next(t.detail for t in report.targets() if t.name == name)


def test_a_floor_under_the_target_says_the_target_was_out_of_reach() -> None:
    report = _report(floor=950.0, runs_floor=720.0)

    sessions = _detail(report, "no-op throughput / raw Celery")
    runs = _detail(report, "no-op throughput, assistants source / raw Celery")

    assert sessions.endswith("; the floor: 0.95 per repetition [0.93, 0.95]")
    assert "; the runs floor: 0.72 per repetition [0.70], under the target" in runs
    assert "fell short of it here" in runs and "under the target" not in sessions


def test_one_slow_repetition_does_not_make_the_floor_fall_short() -> None:
    report = _report(floor=850.0, runs_floor=720.0)  # the median repetitions: 0.85
    report.spread["noop"][f"{FLOOR}_vs_{RAW}"] = [0.97, 0.80, 0.96]  # the pairs: 0.96

    sessions = _detail(report, "no-op throughput / raw Celery")

    assert sessions.endswith("; the floor: 0.85 per repetition [0.97, 0.80, 0.96]")
    report.spread["noop"][f"{FLOOR}_vs_{RAW}"] = [0.87, 0.80, 0.96]  # the pairs: 0.87
    assert "under the target" in _detail(report, "no-op throughput / raw Celery")


def test_without_a_floor_the_target_says_nothing_of_one() -> None:
    report = _report(floor=950.0, runs_floor=720.0)
    del report.results["noop"][FLOOR], report.results["noop"][RUNS_FLOOR]

    assert "floor" not in _detail(report, "no-op throughput / raw Celery")
    assert "floor" not in _detail(report, "no-op throughput, assistants source / raw Celery")
