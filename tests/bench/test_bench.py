"""Smoke test of ``python -m bench --quick``: it runs end to end and its figures are sane.

Never that the machine is fast: only that every figure exists, is finite and positive,
that every call is accounted for, and that the targets are evaluated. The bench runs on
its own Redis databases (4 and 5), apart from the suite's 8 to 15.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.config import BenchConfig
from bench.report import LOAD_PHASES as LOAD_LABELS
from tests.bench.runs import run_bench

SYSTEMS = ("toolfan", "raw_celery", "floor", "threads", "loop")
#: Rows only some workloads have: the no-op workload's runs on the ``assistants`` source.
EXTRA_SYSTEMS = {"noop": {"assistants", "raw_ledger", "runs_floor"}}
#: The target of the ``assistants`` row.
ASSISTANTS_TARGETS = ("no-op throughput, assistants source / raw Celery",)
QUICK_IDLE = 500
#: The target of policies and approvals left unused.
FEATURES_TARGET = "policy and approval check when unused, share of CPU per call"
#: The targets of ``toolfan.run_tool_calls`` (the ``inline`` rows).
INLINE_TARGETS = (
    "run_tool_calls no-op throughput / raw Celery",
    "one no-op run_tool_calls p50 over an in-process call",
    "8 x 50 ms run_tool_calls p50",
)


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    return run_bench(["--quick"], out, "bench.json", 170)


@pytest.mark.timeout(180)
def test_every_workload_and_system_is_measured_and_sane(bench: dict[str, Any]) -> None:
    workloads = bench["json"]["workloads"]
    assert set(workloads) == {"noop", "io"}
    for name, by_system in workloads.items():
        assert set(by_system) == set(SYSTEMS) | EXTRA_SYSTEMS.get(name, set()), name
        for system, m in by_system.items():
            where = f"{name}/{system}"
            for key in ("calls_per_s", "sessions_per_s", "seconds", "cpu_seconds_per_call"):
                assert _positive(m[key]), (where, key, m[key])
            p = m["latency"]
            assert _positive(p["p50"]) and p["p50"] <= p["p95"] <= p["p99"], (where, p)
            assert m["calls"] == m["sessions"] * bench["json"]["info"]["workloads"][name]["calls"]
            if system in (
                "toolfan",
                "raw_celery",
                "assistants",
                "raw_ledger",
                "floor",
                "runs_floor",
            ):
                assert _positive(m["redis_commands_per_call"]), where
        toolfan = by_system["toolfan"]
        assert _positive(toolfan["api_requests_per_poll"])
        extra = toolfan["extra"]
        assert extra["batches"] == extra["sessions_answered"] == toolfan["sessions"]
        assert extra["events"] == toolfan["calls"] and extra["failed_events"] == 0
        for raw in ("raw_celery", "raw_ledger"):
            if raw in by_system:
                assert by_system[raw]["extra"]["results"] == by_system[raw]["calls"], raw
        for system in ("threads", "loop"):
            assert by_system[system]["extra"]["events"] == by_system[system]["calls"]
    _cpu_split_accounts_for_the_cpu(bench)
    _the_ledger_row_writes_each_call_s_record(bench)
    _the_floor_answers_every_session_once(bench)
    _the_runs_floor_answers_every_run_once(bench)


def _the_runs_floor_answers_every_run_once(bench: dict[str, Any]) -> None:
    """The runs floor reads each run itself, and submits each run's outputs once.

    It reads each run twice: once to find it waiting, once after its submit (the least an
    implementation that answers every phase of a run can read it).
    """
    floor = bench["json"]["workloads"]["noop"]["runs_floor"]
    extra = floor["extra"]
    assert (
        extra["published_runs"] == extra["runs_answered"] == extra["submits"] == floor["sessions"]
    )
    assert extra["retrieve_requests"] == 2 * floor["sessions"]
    assert extra["outputs"] == floor["calls"]
    spread = bench["json"]["spread"]["noop"]
    assert len(spread["runs_floor_vs_raw_celery"]) == len(spread["assistants_vs_runs_floor"]) == 2
    text = (bench["out"] / "bench.txt").read_text()
    assert "the runs floor / raw Celery (noop): throughput" in text
    assert "toolfan runs / the runs floor (noop): throughput" in text


def _the_floor_answers_every_session_once(bench: dict[str, Any]) -> None:
    """The floor lists the sessions itself, saves each result once, and posts each batch."""
    text = (bench["out"] / "bench.txt").read_text()
    for name, by_system in bench["json"]["workloads"].items():
        floor = by_system["floor"]
        extra = floor["extra"]
        assert extra["published_sessions"] == extra["sessions_answered"] == floor["sessions"]
        assert extra["batches"] == floor["sessions"] and extra["events"] == floor["calls"]
        assert extra["failed_events"] == 0, name
        # finish alone: one EVALSHA per call more than raw Celery's own (the broker's), where
        # raw + ledger runs two more (the workers' heartbeats may add a few of their own);
        # less two per batch, the claim's and the cleanup's scripts of Celery's join, which
        # raw Celery runs and the floor's chords (joined as toolfan's) do not.
        raw = by_system["raw_celery"]["extra"]["top_redis_commands"].get("evalsha", 0)
        more = extra["top_redis_commands"].get("evalsha", 0) - raw
        least = floor["calls"] - 2 * floor["sessions"]
        assert least <= more < least + floor["calls"], (name, more)
        assert len(bench["json"]["spread"][name]["toolfan_vs_floor"]) == 2
        assert f"the floor / raw Celery ({name}): throughput" in text
        assert f"toolfan / the floor ({name}): throughput" in text


def _the_ledger_row_writes_each_call_s_record(bench: dict[str, Any]) -> None:
    """raw + ledger runs the ledger's two scripts per call: more Redis work than raw Celery."""
    noop = bench["json"]["workloads"]["noop"]
    ledger, raw = noop["raw_ledger"], noop["raw_celery"]
    # begin and finish: two EVALSHAs per call, and the commands inside them.
    assert ledger["redis_commands_per_call"] >= raw["redis_commands_per_call"] + 4
    assert ledger["extra"]["top_redis_commands"].get("evalsha", 0) >= 2 * ledger["calls"]
    spread = bench["json"]["spread"]["noop"]
    assert len(spread["raw_ledger_vs_raw_celery"]) == len(spread["toolfan_vs_raw_ledger"]) == 2
    text = (bench["out"] / "bench.txt").read_text()
    assert "raw + ledger / raw Celery (noop): throughput" in text
    assert "toolfan / raw + ledger (noop): throughput" in text


def _cpu_split_accounts_for_the_cpu(bench: dict[str, Any]) -> None:
    """The CPU by process adds up to the row's CPU per call, and is printed for no-op."""
    workloads = bench["json"]["workloads"]
    for name, by_system in workloads.items():
        for system in ("toolfan", "raw_celery", "assistants", "raw_ledger", "floor", "runs_floor"):
            if system not in by_system:
                continue
            m = by_system[system]
            split = m["extra"]["cpu_ms_per_call_by_process"]
            own = "poller" if system in ("toolfan", "assistants") else "publisher"
            parts = {"worker main", "worker pool", "control worker", own, "api"}
            assert set(split) == parts, (name, system)
            assert all(v >= 0 for v in split.values()) and _positive(split["worker main"])
            counted = sum(split[p] for p in ("worker main", "worker pool", "control worker", own))
            # The same processes as the row's CPU, read a moment apart.
            assert counted == pytest.approx(1000 * m["cpu_seconds_per_call"], rel=0.25, abs=0.5)
    assert _positive(workloads["noop"]["toolfan"]["extra"]["cpu_ms_per_call_by_process"]["api"])
    text = (bench["out"] / "bench.txt").read_text()
    assert "noop toolfan: CPU ms per call by process: worker main" in text
    assert "io toolfan: CPU ms per call by process" not in text  # threads pool: no split


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
    assert bench["stdout"].count(f"the median of {reps} runs by p95, p95 per run [") == 3
    # Beside each run's p95, its busiest stretch of arrivals (the quick runs are 3 s long).
    assert bench["stdout"].count("], the busiest 3 s of arrivals per run [") == 3
    # How much of the machine another guest took during the run (Linux, so measured).
    stolen = data["info"]["cpu_stolen_share"]
    assert isinstance(stolen, float) and 0 <= stolen < 1
    assert "of the CPU time was stolen by the hypervisor" in bench["stdout"]


def test_the_workers_run_with_toolfan_workers_defaults(bench: dict[str, Any]) -> None:
    noop = bench["json"]["info"]["workloads"]["noop"]
    assert noop["pool"] is None and noop["concurrency"] is None
    log = (bench["out"] / "logs" / "worker-noop0.log").read_text()
    assert "prefork" in log and "fn.bench_noop" in log and "toolfan.poll" in log
    # The in-process thread pool and run_tool_calls' callers are sized to the same count.
    processes = BenchConfig().workloads()[0].processes
    assert f"concurrency: {processes} (prefork)" in log


def test_a_default_workload_counts_the_processes_a_default_worker_starts() -> None:
    """Not Celery's one per CPU: toolfan's worker starts two per usable CPU."""
    from tasks.config import usable_cpus

    noop, io = BenchConfig().workloads()
    assert noop.concurrency is None and noop.processes == 2 * usable_cpus()
    assert io.processes == io.concurrency


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
    # The same run at half of the pushed peak: its own burst measured that peak.
    own = data["push_own"]
    assert own["batches"] == own["sessions"] == own["pushed"] >= 1
    assert _positive(own["peak_calls_per_s"]) and _positive(own["latency"]["p95"])
    assert own["rate_calls_per_s"] == pytest.approx(
        max(own["peak_calls_per_s"] / 2, 0.5 * data["info"]["workloads"]["noop"]["calls"])
    )
    reps = data["info"]["reps"]
    for phase in (half, push, own):
        # Each latency phase is repeated, and the run shown is the one of median p95.
        p95s = phase["p95_per_repetition"]
        assert phase["repetitions"] == len(p95s) == reps and all(_positive(p) for p in p95s)
        assert phase["latency"]["p95"] == sorted(p95s)[(reps - 1) // 2]
        busiest = phase["busiest_calls_per_s_per_repetition"]
        assert len(busiest) == reps and all(_positive(b) for b in busiest)
        assert phase["busiest_window_s"] == 3.0  # the quick run's length, under 5 s
        assert _positive(phase["cpu_ms_per_call"]["toolfan"]), phase["cpu_ms_per_call"]
        assert _positive(phase["cpu_ms_per_call"]["emulator"]), phase["cpu_ms_per_call"]
    _load_cpu_is_split_by_process(bench)


#: The processes that must have worked in each half-load phase, by role.
LOAD_ROLES = {
    "half_load": {"workers", "poller", "api"},
    "push_load": {"workers", "intake", "push worker", "api"},
    "push_own": {"workers", "intake", "push worker", "api"},
}


def _load_cpu_is_split_by_process(bench: dict[str, Any]) -> None:
    """Each half-load phase's CPU by role adds up to its totals, and names who did the work."""
    for key, roles in LOAD_ROLES.items():
        phase = bench["json"][key]
        split, totals = phase["cpu_ms_per_call_by_process"], phase["cpu_ms_per_call"]
        assert all(_positive(split[role]) for role in roles), (key, split)
        ours = sum(ms for role, ms in split.items() if role not in ("api", "redis"))
        assert totals["toolfan"] == pytest.approx(ours), (key, split, totals)
        assert totals["emulator"] == split["api"] and totals["redis"] == split.get("redis", 0.0)
        assert key != "half_load" or "intake" not in split  # the push path runs only for pushes
        line = next(
            x
            for x in bench["stdout"].splitlines()
            if "CPU ms per call by process" in x and x.startswith(LOAD_LABELS[key])
        )
        assert "workers" in line, line


@pytest.mark.timeout(180)
def test_targets_are_printed_and_files_written(bench: dict[str, Any]) -> None:
    targets = bench["json"]["targets"]
    names = {t["name"] for t in targets}
    assert len(names) == len(targets) == 12 + len(INLINE_TARGETS) + len(ASSISTANTS_TARGETS) + 1
    assert {*INLINE_TARGETS, *ASSISTANTS_TARGETS, FEATURES_TARGET} <= names
    assert all(isinstance(t["passed"], bool) and t["measured"] is not None for t in targets)
    verdicts = [line for line in bench["stdout"].splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == len(targets)
    assert (bench["out"] / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "calls/s" in (bench["out"] / "bench.txt").read_text()
    print(f"python -m bench --quick took {bench['seconds']:.1f} s")


@pytest.mark.timeout(180)
def test_features_unused_and_in_use_are_measured(bench: dict[str, Any]) -> None:
    features = bench["json"]["features"]
    unused = features["unused"]
    # The check is timed for real: a positive time, far below a whole call's CPU.
    assert _positive(unused["check_seconds_per_call"])
    assert 0 < unused["share_of_cpu_per_call"] < 0.01
    for name, tool in (("policy", "bench_noop_policy"), ("approval", "bench_noop_approved")):
        used = features[name]
        assert used["tool"] == tool and used["failed_events"] == 0
        per_session = bench["json"]["info"]["workloads"]["noop"]["calls"]
        assert used["sessions_answered"] == [used["calls"] // per_session] * used["runs"]
        assert _positive(used["cpu_ms_per_call"]) and _positive(used["plain_cpu_ms_per_call"])
        assert f"{name} in use ({tool}" in bench["stdout"]
    # Every approval was asked and given, once per call: the calls really waited for it.
    approval = features["approval"]
    assert approval["approved"] == approval["calls"]
    assert approval["latency_p50"] > approval["plain_latency_p50"]


def test_an_idle_sessions_hourly_cost_with_webhooks_is_reported(bench: dict[str, Any]) -> None:
    idle = bench["json"]["idle"]
    hourly = idle["per_session_per_hour_with_webhooks"]
    # 60 safety-net passes an hour, each one page request per 100 sessions.
    assert hourly["list_requests"] == pytest.approx(60 / 100)
    assert _positive(hourly["poller_cpu_seconds"]) and hourly["webhook_deliveries"] == 0
    assert "one idle session an hour" in bench["stdout"]


@pytest.mark.timeout(180)
def test_the_assistants_row_answers_every_run_exactly_once(bench: dict[str, Any]) -> None:
    data = bench["json"]
    runs = data["workloads"]["noop"]["assistants"]
    per_run = data["info"]["workloads"]["noop"]["calls"]
    assert runs["sessions"] == data["workloads"]["noop"]["toolfan"]["sessions"]
    extra = runs["extra"]
    # Every run watched, answered by exactly one submit carrying every one of its calls.
    assert extra["runs"] == extra["runs_watched"] == runs["sessions"]
    assert extra["submits"] == extra["runs_answered"] == extra["runs_answered_once"]
    assert extra["runs_answered_once"] == runs["sessions"]
    assert extra["outputs"] == runs["calls"] == runs["sessions"] * per_run
    assert extra["failed_outputs"] == 0 and extra["lost_answers"] == 0
    assert extra["submit_requests"] == runs["sessions"] and extra["poll_passes"] >= 1
    # One read per watched run a pass at least, and the watch is on the clock.
    assert extra["retrieve_requests"] >= runs["sessions"]
    assert 0 <= extra["watch_seconds"] < runs["seconds"]
    assert _positive(extra["poller_cpu_seconds"])
    spread = data["spread"]["noop"]
    assert len(spread["assistants"]) == len(spread["assistants_vs_raw_celery"]) == 2
    ratios = data["ratios_by_system"]["noop"]["assistants"]
    for key in ("throughput_vs_raw_celery", "cpu_vs_raw_celery", "redis_vs_raw_celery"):
        assert _positive(ratios[key]), key
    (target,) = ASSISTANTS_TARGETS
    assert next(t for t in data["targets"] if t["name"] == target)["measured"] is not None
    assert any(target in line for line in bench["stdout"].splitlines())
    assert "toolfan runs" in bench["stdout"]


def _answered_once(row: dict[str, Any], batches: int, calls: int) -> None:
    """Every batch returned, every call answered once in its place, with the tool's output."""
    assert row["batches"] == batches and row["calls"] == batches * calls, row
    assert row["answered"] == row["successes"] == row["calls"], row
    assert row["failures"] == [], row


@pytest.mark.timeout(180)
def test_run_tool_calls_rows_are_measured_and_accounted_for(bench: dict[str, Any]) -> None:
    data = bench["json"]
    inline, noop = data["inline"], data["info"]["workloads"]["noop"]
    throughput = inline["throughput"]
    assert len(throughput["calls_per_s"]) == len(throughput["repetitions"]) == data["info"]["reps"]
    assert all(_positive(v) for v in throughput["calls_per_s"])
    middle = (len(throughput["calls_per_s"]) - 1) // 2
    assert throughput["median"]["calls_per_s"] == sorted(throughput["calls_per_s"])[middle]
    for m in throughput["repetitions"]:
        assert m["system"] == "run_tool_calls" and m["sessions"] == noop["sessions"]
        _answered_once(m["extra"], noop["sessions"], noop["calls"])
        for key in ("seconds", "cpu_seconds_per_call", "redis_commands_per_call"):
            assert _positive(m[key]), key
        assert _positive(m["extra"]["caller_cpu_seconds"]) and m["extra"]["callers"] >= 1
        p = m["latency"]
        assert 0 < p["p50"] <= p["p95"] <= p["p99"] <= m["seconds"]
    single = inline["single_call"]
    _answered_once(single, single["samples"], 1)
    assert single["samples"] == 30 and _positive(single["in_process"]["p50"])
    # The fleet's answer takes longer than the bare function, so the overhead is positive.
    assert 0 < single["overhead_p50"] < single["run_tool_calls"]["p50"]
    # Raw Celery's chord of one bare task on the same workers: the engine's own floor.
    assert _positive(single["raw_celery_chord"]["p50"])
    parallel = inline["parallel"]
    _answered_once(parallel, parallel["samples"], parallel["calls_per_answer"])
    assert parallel["samples"] == 15 and parallel["calls_per_answer"] == 8
    # Eight 50 ms calls take at least one call's 50 ms, and never eight in a row.
    assert 0.05 <= parallel["latency"]["p50"] < 8 * 0.05
    assert 0.05 <= parallel["raw_celery_chord"]["p50"] < 8 * 0.05
    by_name = {t["name"]: t for t in data["targets"]}
    for name in INLINE_TARGETS:
        assert _positive(by_name[name]["measured"]), name
        assert any(name in line for line in bench["stdout"].splitlines()), name
