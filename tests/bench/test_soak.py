"""Smoke test of ``python -m bench soak --quick``: faults on, every session answered once.

Never that memory stays flat in 30 s (the quick run is shorter than its ledger's TTL): only
that the time series is complete, every fault kind was injected, every session was
answered exactly once despite them, each verdict is evaluated and the files are written.
It runs on the bench's databases (4 and 5).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.bench.runs import run_bench

ROLES = ("worker-prefork", "worker-threads", "poller", "victim", "poller-second", "emulator")
#: Verdicts: four memories, keys without TTL, channels, connections, p95, exactly once.
VERDICTS = 9


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("soak")
    return run_bench(["soak", "--quick"], out, "soak.json", 170)


@pytest.mark.timeout(180)
def test_the_series_is_sampled_whole(soak: dict[str, Any]) -> None:
    series = soak["json"]["series"]
    assert len(series) >= 5
    assert [s["t"] for s in series] == sorted(s["t"] for s in series)
    for sample in series:
        for role in ROLES:
            assert _positive(sample["rss"][role]), (role, sample["t"])
        redis = sample["redis"]
        assert _positive(redis["used_memory"])
        assert set(redis["keys"]) == {"broker", "ledger"}
        assert redis["no_ttl_unexpected"] >= 0
        assert redis["pubsub"]["channels"] >= 0 and _positive(redis["clients"]["ours"])
    assert series[-1]["calls_answered"] > series[0]["calls_answered"]
    assert "min" in soak["stderr"] and "p95" in soak["stderr"]
    windows = [w for w in soak["json"]["windows"] if w["sessions"]]
    assert len(windows) >= 2 and all(_positive(w["p95"]) for w in windows)


@pytest.mark.timeout(180)
def test_every_session_is_answered_exactly_once_despite_the_faults(soak: dict[str, Any]) -> None:
    data = soak["json"]
    faults = data["faults"]
    assert faults["worker_kills"] >= 1 and faults["poller_restarts"] >= 1
    for kind in ("error", "throttle", "lost"):
        assert faults["api"].get(kind, 0) >= 1, kind
    assert faults["api"]["replayed"] >= faults["api"]["lost"]
    tally = data["tally"]
    assert tally["missing"] == tally["duplicated"] == tally["wrong"] == 0, tally["problems"]
    assert tally["answered_calls"] == tally["calls"] > tally["sessions"] > 0
    assert tally["failures_answered"] >= 1 and tally["hostile_sessions"] >= 1
    assert data["info"]["epochs"] >= 2


@pytest.mark.timeout(180)
def test_each_verdict_is_evaluated_and_the_files_written(soak: dict[str, Any]) -> None:
    data = soak["json"]
    targets = data["targets"]
    assert len(targets) == VERDICTS
    assert all(isinstance(t["passed"], bool) and t["measured"] is not None for t in targets)
    exactly_once = targets[-1]
    assert exactly_once["passed"], exactly_once
    for role, row in data["memory"].items():
        assert _positive(row["first_bytes"]) and math.isfinite(row["growth_pct"]), role
    verdicts = [line for line in soak["stdout"].splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == VERDICTS
    assert (soak["out"] / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "growth %" in (soak["out"] / "soak.txt").read_text()
    print(f"python -m bench soak --quick took {soak['seconds']:.1f} s")


@pytest.mark.parametrize("option", ["--minutes=0", "--rate=-5", "--interval=nan", "--epoch=0"])
def test_an_option_that_cannot_be_run_is_refused_before_anything_starts(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.soak import main

    assert main([option]) == 2
    assert "must be a positive number" in capsys.readouterr().err
