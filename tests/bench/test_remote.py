"""``python -m bench remote``: an API that answers later holds a prefork worker's processes.

The quick run: 12 sessions of 2 no-op calls, the function worker on 2 processes, the API
stand-in answering 0.2 s late. Each batch's delivery then waits 0.2 s; on one worker of
every queue (``TOOLFAN_CONTROL_THREADS=0``) that wait holds one of its 2 processes, so the
12 deliveries take at least 6 x 0.2 s, where the 12 threads of the control worker that
``toolfan worker`` starts by default wait for them side by side.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.remote import parse_config
from tasks.settings import Settings
from tests.bench.runs import run_bench

LATE = 0.2
SESSIONS, PROCESSES = 12, 2


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("remote")
    sizes = ["--sessions", str(SESSIONS), "--calls", "2", "--pairs", "1", "--threads", "12"]
    args = ["remote", *sizes, "--latencies", f"0,{LATE}", "--concurrency", str(PROCESSES)]
    return run_bench(args, out, "remote.json", 150)


def _pairs(remote: dict[str, Any]) -> dict[tuple[str, float], dict[str, Any]]:
    return {(p["layout"], p["latency"]): p for p in remote["json"]["pairs"]}


@pytest.mark.timeout(160)
def test_every_layout_is_measured_at_every_latency(remote: dict[str, Any]) -> None:
    pairs = _pairs(remote)
    assert set(pairs) == {(lay, lat) for lay in ("one", "split") for lat in (0.0, LATE)}
    for pair in pairs.values():
        for key in ("raw_calls_per_s", "toolfan_calls_per_s", "ratio", "toolfan_seconds"):
            assert math.isfinite(pair[key]) and pair[key] > 0, pair
    text = (remote["out"] / "remote.txt").read_text()
    assert "the API answering later" in text and "200ms  split" in text


@pytest.mark.timeout(160)
def test_a_late_api_holds_the_prefork_processes_and_the_threads_wait_together(
    remote: dict[str, Any],
) -> None:
    pairs = _pairs(remote)
    one, split = pairs["one", LATE], pairs["split", LATE]
    # Every delivery waits LATE on one of the PROCESSES: the stand-in really answered late.
    assert one["toolfan_seconds"] >= SESSIONS / PROCESSES * LATE
    # toolfan worker's defaults start a control worker, whose threads wait side by side:
    # the same deliveries take less than one process's share of them (0.3 s of 1.2 here).
    assert split["toolfan_seconds"] < SESSIONS / PROCESSES * LATE
    assert split["toolfan_seconds"] < one["toolfan_seconds"]


def test_bad_options_are_refused() -> None:
    for argv in (
        ["--latencies", "soon"],
        ["--latencies", "-1"],
        ["--latencies", "nan"],
        ["--pairs", "0"],
        ["--threads", "0"],
        ["--concurrency", "0"],
    ):
        with pytest.raises(SystemExit) as exc:
            parse_config(argv)
        assert exc.value.code == 2, argv
    config = parse_config(["--latencies", "0,0.05", "--threads", "8"])
    assert (config.latencies, config.threads, config.concurrency) == ((0.0, 0.05), 8, None)


def test_the_default_run_measures_toolfan_workers_default_threads() -> None:
    # bench.remote cannot import the settings (the bench's process must not load the engine
    # before it points it at its own stack), so it spells the default: the two must agree.
    assert parse_config([]).threads == Settings.from_env({}).control_threads
