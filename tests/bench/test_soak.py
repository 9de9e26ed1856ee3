"""Smoke test of ``python -m bench soak --quick``: faults on, everything answered once.

Never that memory stays flat in 30 s (the quick run is shorter than its ledger's TTL): only
that the time series is complete, every fault kind was injected, every session, every
watched run's phase and every ``run_tool_calls`` batch was answered exactly once despite
them, sessions were pushed to the webhook intake too and it refused no push, no run is
left watched, each verdict is evaluated and the files are written. It runs
on the bench's databases (4 and 5).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from bench.soak import SoakConfig
from tests.bench.runs import run_bench

ROLES = (
    "worker-prefork",
    "worker-threads",
    "poller",
    "poller-runs",
    "victim",
    "poller-second",
    "emulator",
    "intake",
)
#: Verdicts: six memories, keys without TTL, channels, connections, p95; pushes refused;
#: sessions, runs' phases, runs left watched and run_tool_calls batches answered once.
VERDICTS = 15


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
        assert redis["no_ttl_unexpected"] >= 0 and redis["watched_runs"] >= 0
        assert redis["pubsub"]["channels"] >= 0 and _positive(redis["clients"]["ours"])
        held = sample["connections"]
        assert set(held) == {*ROLES, "bench"}, sample["t"]
        for role in ("worker-prefork", "worker-threads", "poller", "poller-runs", "bench"):
            assert held[role] > 0, (role, sample["t"], held)
        assert all(isinstance(d, int) and d > 0 for d in sample["queues"].values())
    readings = soak["json"]["queues"]
    seconds = soak["json"]["info"]["load_seconds"]
    assert len(readings) >= seconds / 2, (len(readings), seconds)
    assert [r["t"] for r in readings] == sorted(r["t"] for r in readings)
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
def test_the_load_follows_the_median_of_the_calibration_bursts(soak: dict[str, Any]) -> None:
    info = soak["json"]["info"]
    bursts = info["bursts_calls_per_s"]
    assert len(bursts) == 2 and all(_positive(b) for b in bursts)  # the quick run's two
    assert info["burst_calls_per_s"] == pytest.approx(statistics.median(bursts))
    share = SoakConfig().share  # the quick soak offers the default share
    assert info["rate_calls_per_s"] == pytest.approx(share * statistics.median(bursts))
    assert ", ".join(f"{b:.0f}" for b in bursts) in info["rate_source"]


def test_each_calibration_burst_has_hostile_ids_of_its_own() -> None:
    from bench.soak_load import plan_burst

    def ids(plans: list[Any]) -> list[str]:
        return [p.body["session_id"] for p in plans if "session_id" in p.body]

    first, second = ids(plan_burst(300, 1, 0)), ids(plan_burst(300, 1, 1))
    assert first and second  # the same seed draws the same hostile sessions...
    assert len({*first, *second}) == len(first) + len(second)  # ...under ids of their own


@pytest.mark.timeout(180)
def test_every_watched_run_is_submitted_once_per_phase_and_then_unwatched(
    soak: dict[str, Any],
) -> None:
    data = soak["json"]
    runs = data["runs"]
    assert runs["missing"] == runs["duplicated"] == runs["wrong"] == 0, runs["problems"]
    assert runs["answered_calls"] == runs["calls"] >= runs["phases"] > runs["runs"] > 0
    assert runs["watches_left"] == 0
    assert data["faults"]["api_runs"].get("error", 0) >= 1
    assert data["series"][-1]["runs_seeded"] == runs["runs"]
    assert data["info"]["rates_calls_per_s"]["runs"] > 0
    assert "runs poller" in soak["stderr"]


@pytest.mark.timeout(180)
def test_every_run_tool_calls_batch_is_answered_once_from_the_callers(
    soak: dict[str, Any],
) -> None:
    data = soak["json"]
    inline = data["inline"]
    problems = {k: inline[k] for k in ("missing", "duplicated", "wrong", "timed_out", "raised")}
    assert not any(problems.values()), (problems, inline["problems"])
    assert inline["answered_calls"] == inline["calls"] >= inline["batches"] > 0
    assert 0 < data["series"][-1]["batches_answered"] <= inline["batches"]
    assert data["info"]["rates_calls_per_s"]["run_tool_calls"] > 0


@pytest.mark.timeout(180)
def test_sessions_are_pushed_with_the_push_faults_and_every_push_is_accepted(
    soak: dict[str, Any],
) -> None:
    data = soak["json"]
    push = data["push"]
    assert push["refused"] == 0, push
    assert push["events"] >= data["tally"]["sessions"] // 2 > 0
    assert push["attempts"]["delivered"] > 0 and push["dropped"] > 0 and push["duplicated"] > 0
    assert data["info"]["push_faults_set"]["drop"] > 0
    (verdict,) = [t for t in data["targets"] if t["name"].startswith("pushes")]
    assert verdict["passed"]
    assert "soak: pushes: " in (soak["out"] / "soak.txt").read_text()


@pytest.mark.timeout(180)
def test_each_verdict_is_evaluated_and_the_files_written(soak: dict[str, Any]) -> None:
    data = soak["json"]
    targets = data["targets"]
    assert len(targets) == VERDICTS
    assert all(isinstance(t["passed"], bool) and t["measured"] is not None for t in targets)
    once = [t for t in targets if "exactly once" in t["name"] or "still watched" in t["name"]]
    assert len(once) == 4 and all(t["passed"] for t in once), once
    for role, row in data["memory"].items():
        assert _positive(row["first_bytes"]) and math.isfinite(row["growth_pct"]), role
    verdicts = [line for line in soak["stdout"].splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == VERDICTS
    assert (soak["out"] / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (soak["out"] / "soak.txt").read_text()
    assert "growth %" in text and "soak: runs: " in text and "run_tool_calls batches" in text
    assert "slowest windows" in text and "\nconnections " in text  # the table's header
    print(f"python -m bench soak --quick took {soak['seconds']:.1f} s")


@pytest.mark.parametrize(
    "option", ["--minutes=0", "--rate=-5", "--interval=nan", "--epoch=0", "--bursts=0"]
)
def test_an_option_that_cannot_be_run_is_refused_before_anything_starts(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.soak import main

    assert main([option]) == 2
    assert "must be a positive number" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options",
    [["--runs-share=1"], ["--inline-share=-0.1"], ["--runs-share=0.5", "--inline-share=0.5"]],
)
def test_shares_that_leave_sessions_nothing_are_refused(
    options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.soak import main

    assert main(options) == 2
    assert "--runs-share and --inline-share" in capsys.readouterr().err


def _run(phases: list[dict[str, bool]]) -> Any:
    from bench.soak_runs import RunPlan, SeededRun

    return SeededRun("thread_1", "run_1", 100.0, RunPlan({"phases": []}, phases))


def _submit(phase: int, outputs: dict[str, str], at: float = 101.0) -> dict[str, Any]:
    tool_outputs = [{"tool_call_id": k, "output": v} for k, v in outputs.items()]
    return {
        "thread_id": "thread_1",
        "run_id": "run_1",
        "phase": phase,
        "tool_outputs": tool_outputs,
        "received_at": at,
        "lost": False,
    }


def test_the_runs_tally_finds_a_phase_missing_submitted_twice_or_answered_wrongly() -> None:
    from bench.soak_runs import RunTally, phase_times

    run = _run([{"a": True, "b": False}, {"c": True}])
    error = '{"error": "bench_fail always fails"}'
    good = RunTally()
    first, second = _submit(0, {"a": "ok", "b": error}), _submit(1, {"c": "ok"}, 103.0)
    good.add([run], [first, second])
    assert (good.errors, good.answered, good.failures, good.phases) == (0, 3, 1, 2)
    assert phase_times([run], [first, second], 0.5) == [(100.0, 1.0), (101.5, 1.5)]
    missing = RunTally()
    missing.add([run], [first])
    assert missing.missing == 1
    twice = RunTally()
    twice.add([run], [first, first, second])
    assert twice.duplicated >= 1
    wrong = RunTally()
    wrong.add([run], [_submit(0, {"a": error, "b": "ok"}), second])
    assert wrong.wrong == 2


def test_the_inline_tally_counts_timeouts_and_calls_out_of_order() -> None:
    from bench.soak_inline import BatchAnswer, BatchPlan, InlineTally

    plan = BatchPlan("c", [], {"call_0": True, "call_1": False})
    error = '{"error": "bench_fail always fails"}'
    timeout = '{"error": "Function \'bench_noop\' did not finish within the 30 s"}'

    def answer(*pairs: tuple[str, str]) -> BatchAnswer:
        messages = [{"role": "tool", "tool_call_id": i, "content": c} for i, c in pairs]
        return BatchAnswer(plan, 1.0, 0.1, messages)

    tally = InlineTally()
    tally.add([answer(("call_0", "ok"), ("call_1", error))])
    assert (tally.errors, tally.answered, tally.failures) == (0, 2, 1)
    tally.add([answer(("call_0", timeout), ("call_1", error))])
    assert tally.timed_out == 1
    tally.add([answer(("call_1", error), ("call_0", "ok"))])
    assert tally.wrong == 1
    tally.add([BatchAnswer(plan, 1.0, 0.1, None, "ConnectionError")])
    assert tally.raised == 1 and tally.errors == 3


def test_a_refused_push_fails_the_push_verdict_and_no_push_judges_no_intake() -> None:
    from bench.soak_report import push_targets, roles_of

    push = {"events": 10, "dropped": 1, "duplicated": 1, "refused": 1, "attempts": {}}
    (verdict,) = push_targets({**push, "attempts": {"delivered": 9, "failed": 1}})
    assert not verdict.passed and verdict.measured == 1
    (verdict,) = push_targets({**push, "refused": 0, "attempts": {"delivered": 10}})
    assert verdict.passed
    assert push_targets(None) == []
    assert "intake" not in roles_of([{"rss": {"poller": 1}}])
    assert "intake" in roles_of([{"rss": {"poller": 1, "intake": 1}}])


def _sample(t: float, server: int, held: dict[str, int] | None) -> dict[str, Any]:
    sample: dict[str, Any] = {"t": t, "redis": {"clients": {"ours": server}}}
    if held is not None:
        sample["connections"] = held
    return sample


def test_the_connections_verdict_judges_toolfans_processes_not_the_soaks_own() -> None:
    from bench.soak_report import connections_target

    # The soak's own pool grows by 30 while toolfan's trees hold theirs: the server's count
    # rises by 30 (over its limit of 10 % of 80), and the verdict still passes.
    flat = [_sample(t, 80 + t, {"worker-prefork": 50, "bench": 30 + t}) for t in range(0, 31, 5)]
    verdict = connections_target(flat, 0)
    assert verdict.passed and verdict.measured == 0, verdict
    assert "85 -> 105" in verdict.detail  # the server's count (medians of three), still shown
    # A toolfan tree that grows by as much fails it.
    leak = [_sample(t, 80 + t, {"worker-prefork": 50 + t, "bench": 30}) for t in range(0, 31, 5)]
    assert not connections_target(leak, 0).passed
    # A series sampled before per-tree counts is judged by the server's count, as it was.
    old = [_sample(t, 80 + t, None) for t in range(0, 31, 5)]
    assert not connections_target(old, 0).passed
    assert connections_target([_sample(t, 80, None) for t in range(0, 31, 5)], 0).passed
