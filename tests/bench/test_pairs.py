"""``python -m bench pairs``: chosen rows in turn on one stack, with a setting applied.

The quick run: one round of four rows (raw Celery first, as the baseline) over 6 sessions
or runs of 2 no-op calls, with ``TOOLFAN_LOG_FORMAT=text`` given through ``--env``, which
shows in the workers' own log lines whether the setting reached them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from bench.pairs import by_switch, parse_config, rotated, switched
from tests.bench.runs import run_bench
from tests.services import ROOT, default_endings, wait_for

ROWS = ("raw", "toolfan", "runs-floor", "runs")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("pairs")
    args = ["pairs", "--rows", ",".join(ROWS), "--pairs", "1", "--sessions", "6", "--calls", "2"]
    return run_bench([*args, "--env", "TOOLFAN_LOG_FORMAT=text"], out, "pairs.json", 150)


@pytest.mark.timeout(160)
def test_every_row_is_measured_against_the_first(pairs: dict[str, Any]) -> None:
    results = pairs["json"]["results"]
    assert pairs["json"]["rows"] == list(ROWS)
    assert results["raw"]["ratio_to_first"] == [1.0]
    for name in ROWS:
        (rate,) = results[name]["calls_per_s"]
        (ratio,) = results[name]["ratio_to_first"]
        assert math.isfinite(rate) and rate > 0, name
        assert ratio == pytest.approx(rate / results["raw"]["calls_per_s"][0]), name
        assert results[name]["cpu_ms_per_call_by_process"], name
    # The runs floor reads each run once to find it waiting and once after its submit.
    assert results["runs-floor"]["run_reads_per_run"] == 2.0
    assert results["runs"]["run_reads_per_run"] >= 1.0
    assert results["raw"]["run_reads_per_run"] is None
    text = (pairs["out"] / "pairs.txt").read_text()
    assert "TOOLFAN_LOG_FORMAT=text" in text and "ratio = calls/s over raw's" in text


@pytest.mark.timeout(160)
def test_a_setting_given_with_env_reaches_the_workers(pairs: dict[str, Any]) -> None:
    # JSON is the workers' default format: their per-call lines are text only if the
    # variable reached them.
    log = (pairs["out"] / "logs" / "worker-noop0.log").read_text()
    calls = [line for line in log.splitlines() if "function=bench_noop call ok" in line]
    assert calls, log[-2000:]
    assert not any(line.startswith("{") for line in calls)


def test_each_round_starts_one_row_later() -> None:
    rows = ["a", "b", "c"]
    assert [rotated(rows, r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_the_switch_is_on_in_pairs_of_rounds_and_each_state_is_summed_up_apart() -> None:
    assert [switched(r) for r in range(8)] == [False, False, True, True] * 2
    split = by_switch([0.80, 0.84, 0.90, 0.88, 0.82, 0.86, 0.94, 0.92])
    assert (split["off"], split["on"]) == ([0.80, 0.84, 0.82, 0.86], [0.90, 0.88, 0.94, 0.92])
    assert (split["median_off"], split["median_on"]) == pytest.approx((0.83, 0.91))
    assert split["on_over_off"] == pytest.approx(0.91 / 0.83)


def test_a_switch_that_exists_or_has_too_few_rounds_is_refused(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("someone's file")
    for argv in (
        ["--switch", str(tmp_path / "free"), "--pairs", "3"],  # one state only
        ["--switch", str(taken), "--pairs", "4"],  # it would be deleted
        ["--switch", str(tmp_path), "--pairs", "4"],  # a directory
        ["--switch", str(tmp_path / "no" / "such"), "--pairs", "4"],
    ):
        with pytest.raises(SystemExit) as exc:
            parse_config(argv)
        assert exc.value.code == 2, argv
    assert taken.read_text() == "someone's file"
    config = parse_config(["--switch", str(tmp_path / "free"), "--pairs", "4"])
    assert config.switch == tmp_path / "free"


@pytest.mark.timeout(160)
def test_the_switch_file_is_there_in_its_rounds_only_and_gone_at_the_end(tmp_path: Path) -> None:
    switch = tmp_path / "switch"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_CURRENT_TEST", None)
    args = ["pairs", "--rows", "raw,runs", "--pairs", "4", "--sessions", "4", "--calls", "2"]
    err = tmp_path / "stderr.log"
    seen: list[tuple[int, bool]] = []  # (rounds begun, whether the file was there)
    with err.open("wb") as stderr:
        bench = subprocess.Popen(
            [sys.executable, "-m", "bench", *args, "--switch", str(switch), "--out", str(tmp_path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            while bench.poll() is None:
                begun = err.read_text(errors="replace").count(": raw_celery:")
                seen.append((begun, switch.exists()))
                time.sleep(0.01)
        finally:
            if bench.poll() is None:
                bench.kill()
            bench.wait(150)
    printed = err.read_text(errors="replace")
    assert bench.returncode == 0, printed
    assert not switch.exists()
    # Rounds 3 and 4 print ", switch on"; the file was seen while they ran, never before.
    assert "round 3: raw_celery:" in printed and printed.count(", switch on") == 4, printed
    assert any(there for _, there in seen)
    assert not any(there for begun, there in seen if begun < 2)
    doc = json.loads((tmp_path / "pairs.json").read_text())
    split = doc["results"]["runs"]["switch"]
    assert len(split["off"]) == len(split["on"]) == 2
    assert split["on"] == doc["results"]["runs"]["ratio_to_first"][2:4]
    assert split["reads_per_run_off"] >= 1 and split["reads_per_run_on"] >= 1
    assert "reads_per_run_on" not in doc["results"]["raw"]["switch"]  # raw Celery reads no run
    assert "on/off" in (tmp_path / "pairs.txt").read_text()


def test_bad_options_are_refused() -> None:
    for argv in (
        ["--rows", "raw,fast"],
        ["--rows", "raw,raw"],
        ["--rows", ","],
        ["--env", "PATH=/tmp"],
        ["--env", "TOOLFAN_X"],
        ["--pairs", "0"],
        ["--sessions", "0"],
        ["--workload", "gevent"],
        ["--workload", "io", "--rows", "raw,runs"],  # the runs rows are no-op only
        ["--workload", "io", "--rows", "raw-ledger"],
    ):
        with pytest.raises(SystemExit) as exc:
            parse_config(argv)
        assert exc.value.code == 2, argv
    config = parse_config(["--rows", "floor, runs", "--env", "TOOLFAN_RUNS_RECHECK=2"])
    assert (config.rows, config.env) == (("floor", "runs"), {"TOOLFAN_RUNS_RECHECK": "2"})
    assert config.workload == "noop"
    assert parse_config(["--workload", "io", "--rows", "raw,floor,toolfan"]).workload == "io"


@pytest.mark.timeout(160)
def test_the_io_workload_s_rows_run_its_tool_on_its_workers(tmp_path) -> None:
    args = ["pairs", "--workload", "io", "--rows", "raw,toolfan", "--pairs", "1"]
    done = run_bench([*args, "--sessions", "4", "--calls", "2"], tmp_path, "pairs.json", 150)
    doc = done["json"]
    assert (doc["workload"], doc["sessions"]) == ("io", 4)
    assert doc["results"]["toolfan"]["median_ratio"] > 0
    assert "I/O rows in turn, 1 rounds of 4 x 2 calls" in (tmp_path / "pairs.txt").read_text()
    logs = "".join(p.read_text() for p in (tmp_path / "logs").glob("worker-*.log"))
    calls = [line for line in logs.splitlines() if '"function": "bench_' in line]
    assert calls and all('"function": "bench_io"' in line for line in calls), logs[-2000:]


@pytest.mark.timeout(160)
def test_a_bench_ended_by_sigterm_stops_its_services_first(tmp_path: Path) -> None:
    # A CI job's cancel or ``timeout`` sends SIGTERM: Python's default for it ends the
    # bench at once, and its workers, emulator and private Redis ran on.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_CURRENT_TEST", None)
    args = ["pairs", "--rows", "raw,toolfan", "--pairs", "3", "--sessions", "6", "--calls", "2"]
    log = tmp_path / "stderr.log"
    with log.open("wb") as err:
        bench = subprocess.Popen(
            [sys.executable, "-m", "bench", *args, "--private-redis", "--out", str(tmp_path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=default_endings,
        )
    services: list[psutil.Process] = []
    try:
        # Once raw Celery's first round is measured, the whole stack is up.
        wait_for(lambda: b"round 1: raw_celery" in log.read_bytes(), 90, "the first round")
        services = psutil.Process(bench.pid).children(recursive=True)
        assert len(services) >= 4  # workers, their pools, the emulator, a poller, Redis
        bench.send_signal(signal.SIGTERM)
        bench.wait(90)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        left = [p for p in services if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in left:  # so that a failure here leaves nothing running either
            p.kill()
    printed = log.read_text(errors="replace")
    assert bench.returncode == 128 + signal.SIGTERM, printed
    assert "stopped by SIGTERM; its services are stopped" in printed
    assert left == []
