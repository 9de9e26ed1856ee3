"""The soak's verdicts, text and picture, from its time series.

Growth is measured from the first steady samples (after the warm-up, once caches are warm
and the ledger holds a full TTL of records) to the last ones, each end the median of
:data:`ENDS` samples, so one sample taken during a burst or a restart moves neither end.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.report import Target
from bench.soak_queues import deepest, peaks

Sample = dict[str, Any]
#: Samples at each end of the steady part whose median is that end's value.
ENDS = 3
#: Most memory growth allowed from the first steady samples to the last, in %. Warm Python
#: processes still move by a few MB (allocator arenas, lazily filled caches) and Redis by
#: the Poisson load's swing in records within one TTL; a leak of a single 100-byte object
#: per call grows a 100 MB worker by 27 % over 30 minutes at 150 calls/s, well beyond it.
MEMORY_GROWTH_LIMIT = 10.0
#: How much slower the last p95 window may be than the first steady one: twice the spread
#: of p95 between windows of one steady run, so only a trend (a queue that builds, a pass
#: that lengthens with every session ever seen) fails it.
P95_RATIO_LIMIT = 1.5
#: Memory roles judged: the workers and pollers that live the whole run, and Redis.
MEMORY_ROLES = {
    "worker-prefork": "prefork worker (main + pool processes) RSS",
    "worker-threads": "threads worker RSS",
    "poller": "poller RSS",
    "poller-runs": "runs poller RSS",
    "intake": "webhook intake RSS",
    "redis": "Redis used_memory",
}
#: Windows listed with where their calls waited: the slowest by the sessions' p95.
SLOWEST = 3


def roles_of(series: Sequence[Sample]) -> list[str]:
    """The judged roles the samples hold (no intake in a run without pushes)."""
    sampled = set(series[0]["rss"]) if series else set()
    return [r for r in MEMORY_ROLES if r == "redis" or r in sampled]


#: The other sources' p95 per window, reported beside the sessions' verdict (their own
#: windows hold fewer answers, so a trend shows less surely there).
SOURCE_P95 = {"runs": "runs' phases", "run_tool_calls": "run_tool_calls batches"}


def memory_of(sample: Sample, role: str) -> float:
    """Bytes of one role in a sample (Redis's ``used_memory`` or a process tree's RSS)."""
    if role == "redis":
        return float(sample["redis"]["used_memory"])
    return float(sample["rss"].get(role, math.nan))


def ends(
    series: Sequence[Sample], warmup: float, value: Callable[[Sample], float]
) -> tuple[float, float]:
    """Median of the first and of the last :data:`ENDS` steady samples."""
    steady = steady_part(series, warmup)
    if not steady:
        return math.nan, math.nan
    first = [value(s) for s in steady[:ENDS]]
    last = [value(s) for s in steady[-ENDS:]]
    return statistics.median(first), statistics.median(last)


def steady_part(series: Sequence[Sample], warmup: float) -> list[Sample]:
    """The samples after the warm-up (all of them when none are)."""
    steady = [s for s in series if s["t"] >= warmup]
    return steady or list(series)


def growth(first: float, last: float) -> float:
    """Growth from ``first`` to ``last`` in %."""
    return (last - first) / first * 100 if first else math.nan


def slope_per_hour(
    series: Sequence[Sample], warmup: float, value: Callable[[Sample], float]
) -> float:
    """Least-squares slope of a value over the steady samples, per hour."""
    steady = steady_part(series, warmup)
    points = [(s["t"], value(s)) for s in steady if math.isfinite(value(s))]
    if len(points) < 2 or len({t for t, _ in points}) < 2:
        return math.nan
    xs, ys = zip(*points, strict=True)
    return statistics.linear_regression(xs, ys).slope * 3600


def memory_table(series: Sequence[Sample], warmup: float) -> dict[str, dict[str, float]]:
    """Per role: first and last steady bytes, growth %, and slope in bytes and % per hour."""
    table = {}
    for role in roles_of(series):

        def value(s: Sample, role: str = role) -> float:
            return memory_of(s, role)

        first, last = ends(series, warmup, value)
        slope = slope_per_hour(series, warmup, value)
        table[role] = {
            "first_bytes": first,
            "last_bytes": last,
            "growth_pct": growth(first, last),
            "slope_bytes_per_hour": slope,
            "slope_pct_per_hour": slope / first * 100 if first else math.nan,
        }
    return table


def count_limit(first: float) -> float:
    """Allowed rise of a count (connections, channels): 2, or 10 % of a large count.

    A restart or a burst opens a connection or two for a moment; a leak opens one per
    call, session or restart and keeps it, which outgrows this within minutes.
    """
    return max(2.0, 0.1 * first) if math.isfinite(first) else 2.0


def targets(soak: dict[str, Any]) -> list[Target]:
    """The soak's verdicts: flat memory, no leaked keys, channels and connections, p95, once."""
    series, warmup = soak["series"], soak["config"]["warmup"]
    out = []
    for role, what in MEMORY_ROLES.items():
        if role not in soak["memory"]:
            continue
        row = soak["memory"][role]
        detail = (
            f"{row['first_bytes'] / 1e6:.1f} -> {row['last_bytes'] / 1e6:.1f} MB, "
            f"slope {row['slope_bytes_per_hour'] / 1e6:+.1f} MB/h"
        )
        out.append(Target(f"{what} growth %", row["growth_pct"], "<=", MEMORY_GROWTH_LIMIT, detail))
    first, last = ends(series, warmup, lambda s: float(s["redis"]["no_ttl_unexpected"]))
    out.append(
        Target(
            "keys without TTL beyond the persistent set, growth",
            last - first,
            "<=",
            0,
            f"{first:g} -> {last:g} keys (broker queues, unacked bookkeeping and the watched "
            "runs' hash excluded)",
        )
    )
    first, last = ends(series, warmup, lambda s: float(s["redis"]["pubsub"]["channels"]))
    out.append(
        Target(
            "pub/sub channels, growth",
            last - first,
            "<=",
            count_limit(first),
            f"{first:g} -> {last:g}",
        )
    )
    out.append(connections_target(series, warmup))
    out.append(_p95_target(soak["windows"], warmup))
    return out + exactly_once(soak)


#: The role of the soak's own process in a sample's ``connections``: not toolfan's.
BENCH = "bench"


def toolfan_connections(sample: Sample) -> float:
    """Connections to Redis held by toolfan's process trees (every role but the soak's own).

    A series sampled before per-tree counts has only the server's count of clients on the
    bench's databases, which includes the soak's own connections; that count stands in.
    """
    held = sample.get("connections")
    if held is None:
        return server_connections(sample)
    return float(sum(count for role, count in held.items() if role != BENCH))


def server_connections(sample: Sample) -> float:
    """The server's count of clients on the bench's databases, the soak's own included."""
    return float(sample["redis"]["clients"]["ours"])


def connections_target(series: Sequence[Sample], warmup: float) -> Target:
    """Connections held by toolfan's processes must not grow (the soak's own pool aside)."""
    first, last = ends(series, warmup, toolfan_connections)
    server = ends(series, warmup, server_connections)
    return Target(
        "connections, growth",
        last - first,
        "<=",
        count_limit(first),
        f"{first:g} -> {last:g} held by toolfan's processes (the server's count, the soak's "
        f"own included: {server[0]:g} -> {server[1]:g})",
    )


def _errors(tally: dict[str, Any]) -> str:
    return f"{tally['missing']} missing, {tally['duplicated']} duplicated, {tally['wrong']} wrong"


#: What counts against a ``run_tool_calls`` batch: a call lost, answered twice, wrongly or
#: with the timeout error, or a call that raised.
INLINE_ERRORS = ("missing", "duplicated", "wrong", "timed_out", "raised")


def exactly_once(soak: dict[str, Any]) -> list[Target]:
    """Each source's answers, checked from the outside; and the watches the runs left."""
    tally, runs, inline = soak["tally"], soak["runs"], soak["inline"]
    inline_errors = sum(inline[k] for k in INLINE_ERRORS)
    left = runs["watches_left"]
    return [
        *push_targets(soak.get("push")),
        Target(
            "sessions not answered exactly once",
            float(tally["missing"] + tally["duplicated"] + tally["wrong"]),
            "==",
            0,
            f"{tally['sessions']:,} sessions, {tally['calls']:,} calls: {_errors(tally)}, "
            f"{tally['failures_answered']:,} failures answered as failures",
        ),
        Target(
            "runs' phases not submitted exactly once",
            float(runs["missing"] + runs["duplicated"] + runs["wrong"]),
            "==",
            0,
            f"{runs['runs']:,} runs, {runs['phases']:,} phases, {runs['calls']:,} calls: "
            f"{_errors(runs)}, {runs['failures_answered']:,} failures answered as errors, "
            f"{runs['lost_answers']} submits' answers lost",
        ),
        Target(
            "runs still watched once all were answered",
            None if left is None else float(left),
            "==",
            0,
            "a watch the pollers never dropped would stay for good",
        ),
        Target(
            "run_tool_calls batches not answered exactly once",
            float(inline_errors),
            "==",
            0,
            f"{inline['batches']:,} batches, {inline['calls']:,} calls: {_errors(inline)}, "
            f"{inline['timed_out']} timed out, {inline['raised']} raised, "
            f"{inline['failures_answered']:,} failures answered as errors",
        ),
    ]


def push_targets(push: dict[str, Any] | None) -> list[Target]:
    """The pushes' verdict: every attempt that reached the intake accepted (none without)."""
    if push is None:
        return []
    attempts = ", ".join(f"{n:,} {outcome}" for outcome, n in sorted(push["attempts"].items()))
    return [
        Target(
            "pushes the intake refused or left unanswered",
            float(push["refused"]),
            "==",
            0,
            f"{push['events']:,} events ({push['dropped']:,} dropped, {push['duplicated']:,} "
            f"sent twice), attempts: {attempts or 'none'}",
        )
    ]


def _p95_target(windows: Sequence[dict[str, Any]], warmup: float) -> Target:
    """The last window's p95 against the first steady one's (the sessions')."""
    name = "p95 time to answer, last window / first steady"
    trend = p95_trend(windows, warmup)
    if trend is None:
        return Target(name, None, "<=", P95_RATIO_LIMIT, "no window")
    ratio, detail = trend
    return Target(name, ratio, "<=", P95_RATIO_LIMIT, detail)


def p95_trend(windows: Sequence[dict[str, Any]], warmup: float) -> tuple[float, str] | None:
    """The last window's p95 over the first steady one's, and both; None without a window."""
    full = [w for w in windows if w["sessions"]]
    steady = [w for w in full if w["start"] >= warmup] or full
    if not steady:
        return None
    first, last = steady[0], steady[-1]
    ratio = last["p95"] / first["p95"] if first["p95"] else math.nan
    detail = (
        f"{first['p95']:.3f} s at {first['start']:.0f} s -> {last['p95']:.3f} s at "
        f"{last['start']:.0f} s; windows of {first['end'] - first['start']:.0f} s"
    )
    return ratio, detail


def source_lines(soak: dict[str, Any]) -> list[str]:
    """What each source offered and had answered, and the other sources' p95 trend."""
    rates = soak["info"].get("rates_calls_per_s", {})
    runs, inline = soak["runs"], soak["inline"]
    out = [
        "soak: offered calls/s by source: "
        + ", ".join(f"{name} {rate:.1f}" for name, rate in rates.items()),
        f"soak: runs: {runs['runs']:,} runs, {runs['phases']:,} phases, {runs['calls']:,} "
        f"calls ({runs['failures_answered']:,} failing), {runs['lost_answers']} submits' "
        f"answers lost; run_tool_calls: {inline['batches']:,} batches, {inline['calls']:,} "
        f"calls ({inline['failures_answered']:,} failing)",
    ]
    push = soak.get("push")
    if push is not None:
        statuses = ", ".join(f"{n:,} {code}" for code, n in sorted(push["statuses"].items()))
        out.append(
            f"soak: pushes: {push['events']:,} events to the intake ({push['dropped']:,} "
            f"dropped, {push['duplicated']:,} sent twice), attempts by status: {statuses}"
        )
    for source, what in SOURCE_P95.items():
        trend = p95_trend(soak["windows_by_source"].get(source, []), soak["config"]["warmup"])
        shown = "no window" if trend is None else f"{trend[0]:.3g} ({trend[1]})"
        out.append(f"soak: p95 time to answer of {what}, last window / first steady: {shown}")
    return out


def lines(soak: dict[str, Any]) -> list[str]:
    """The text report: what ran, the memory table, persistent keys, verdicts."""
    info, tally, faults = soak["info"], soak["tally"], soak["faults"]
    out = [
        f"soak: {info['load_seconds']:.0f} s of load ({soak['config']['warmup']:g} s warm-up), "
        f"{info['rate_calls_per_s']:.1f} calls/s offered "
        f"({info['rate_source']}), {info['answered_calls_per_s']:.1f} calls/s answered",
        f"soak: {tally['sessions']:,} sessions, {tally['calls']:,} calls "
        f"({tally['hostile_sessions']} with hostile ids), "
        f"{tally['failures_answered']:,} failing calls",
        *source_lines(soak),
        f"soak: faults: {faults['worker_kills']} workers SIGKILLed, "
        f"{faults['poller_restarts']} poller restarts, API {faults['api'].get('error', 0)} 500s, "
        f"{faults['api'].get('throttle', 0)} 429s, {faults['api'].get('lost', 0)} lost 202s, "
        f"{faults['api'].get('replayed', 0)} replays; {info['epochs']} emulator epochs "
        f"({info['epochs_skipped']} resets postponed)",
        _runs_faults(faults.get("api_runs", {})),
        "",
        f"{'memory':<16}{'first MB':>10}{'last MB':>10}{'growth %':>10}{'MB/h':>10}{'%/h':>9}",
    ]
    for role, row in soak["memory"].items():
        out.append(
            f"{role:<16}{row['first_bytes'] / 1e6:>10.1f}{row['last_bytes'] / 1e6:>10.1f}"
            f"{row['growth_pct']:>10.1f}{row['slope_bytes_per_hour'] / 1e6:>10.1f}"
            f"{row['slope_pct_per_hour']:>9.1f}"
        )
    out += ["", "keys without TTL at the last sample, by pattern (broker, ledger):"]
    last = soak["series"][-1]["redis"]["no_ttl"] if soak["series"] else {}
    for role, patterns in last.items():
        for name, count in sorted(patterns.items()):
            out.append(f"  {role:<7} {count:>6}  {name}")
    out += slowest_lines(soak) + connection_lines(soak)
    out.append("")
    out += [t.line() for t in soak["targets_evaluated"]]
    return out


def slowest_lines(soak: dict[str, Any]) -> list[str]:
    """The :data:`SLOWEST` windows by p95, each with the queues that stood deepest in it.

    A window holds the sessions *seeded* in it, and the queues read in the same span of
    the clock: those of a session seeded late in a window and answered after it are
    partly read in the next one, so a window's deepest queues are an approximation.
    """
    points = soak.get("queues") or []
    full = [w for w in soak["windows"] if w["sessions"]]
    if not full or not points:
        return []
    out = ["", "slowest windows (sessions' p95), and the deepest queues in them (messages):"]
    for w in sorted(full, key=lambda w: -w["p95"])[:SLOWEST]:
        depths = peaks(points, w["start"], w["end"])
        out.append(f"  {w['start']:>6.0f} s  p95 {w['p95']:6.3f} s  {deepest(depths)}")
    return out


def connection_lines(soak: dict[str, Any]) -> list[str]:
    """Connections to Redis by process tree: the first steady sample, the last, the most."""
    steady = [
        s for s in steady_part(soak["series"], soak["config"]["warmup"]) if "connections" in s
    ]
    if not steady:
        return []
    roles = sorted({role for s in steady for role in s["connections"]})
    out = ["", f"{'connections':<16}{'first':>8}{'last':>8}{'most':>8}"]
    for role in roles:
        counts = [s["connections"].get(role, 0) for s in steady]
        out.append(f"{role:<16}{counts[0]:>8}{counts[-1]:>8}{max(counts):>8}")
    return out


def _runs_faults(api: dict[str, int]) -> str:
    """The runs' share of the API's faults (their lost answers are read back, not replayed)."""
    return (
        f"soak: faults of runs' requests: {api.get('error', 0)} 500s, "
        f"{api.get('throttle', 0)} 429s, {api.get('lost', 0)} lost answers of submits"
    )


def draw(soak: dict[str, Any], path: Path) -> None:
    """Four panels over time: memory, keys, pub/sub and connections, p95 per window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = soak["series"]
    minutes = [s["t"] / 60 for s in series]
    fig, axes = plt.subplots(2, 2, figsize=(15, 9), sharex=True)
    mem, keys, conns, p95 = axes.flat
    for role, row in soak["memory"].items():
        base = row["first_bytes"]
        label = f"{role} ({base / 1e6:.1f} MB)"
        mem.plot(minutes, [memory_of(s, role) / base * 100 - 100 for s in series], label=label)
    mem.axhline(MEMORY_GROWTH_LIMIT, color="#d62728", linestyle="--", linewidth=1)
    mem.set_ylabel("% against the first steady samples")
    mem.set_title("Memory growth (RSS of process trees; Redis used_memory)")
    for role in ("broker", "ledger"):
        keys.plot(minutes, [s["redis"]["keys"][role] for s in series], label=f"{role} keys")
    keys.plot(
        minutes, [s["redis"]["no_ttl_unexpected"] for s in series], label="without TTL (not queues)"
    )
    keys.plot(minutes, [s["redis"]["watched_runs"] for s in series], label="watched runs")
    keys.set_yscale("symlog")
    keys.set_title("Keys (DBSIZE), and keys without TTL beyond the broker's queues")
    conns.plot(minutes, [s["redis"]["clients"]["ours"] for s in series], label="connections")
    conns.plot(
        minutes, [s["redis"]["pubsub"]["channels"] for s in series], label="pub/sub channels"
    )
    conns.plot(
        minutes, [s["redis"]["pubsub"]["subscriptions"] for s in series], label="subscriptions"
    )
    held = [s for s in series if "connections" in s]
    for role in sorted({role for s in held for role in s["connections"]}):
        counts = [s["connections"].get(role, 0) for s in held]
        if any(counts):
            at = [s["t"] / 60 for s in held]
            conns.plot(at, counts, linewidth=0.8, linestyle="--", label=f"held by {role}")
    conns.set_title("Redis connections (bench databases; held by each process tree) and pub/sub")
    windows = [w for w in soak["windows"] if w["sessions"]]
    mids = [(w["start"] + w["end"]) / 120 for w in windows]
    p95.plot(mids, [w["p95"] for w in windows], marker="o", label="p95 (sessions)")
    p95.plot(mids, [w["p50"] for w in windows], marker=".", label="p50 (sessions)")
    for source, what in SOURCE_P95.items():
        rows = [w for w in soak["windows_by_source"].get(source, []) if w["sessions"]]
        mids = [(w["start"] + w["end"]) / 120 for w in rows]
        p95.plot(mids, [w["p95"] for w in rows], marker="x", label=f"p95 ({what})")
    p95.set_ylabel("seconds")
    p95.set_title("Time to answer per window of seeding time")
    warmup = soak["config"]["warmup"] / 60
    for ax in axes.flat:
        ax.axvline(warmup, color="grey", linestyle=":", linewidth=1)
        for event in soak["events"]:
            colour = "#d62728" if event["kind"] == "kill_worker" else "#9467bd"
            ax.axvline(event["t"] / 60, color=colour, alpha=0.3, linewidth=1)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    for ax in (p95, conns):
        ax.set_xlabel(
            "minutes (dotted: end of warm-up; red: worker SIGKILL; purple: poller restart)"
        )
    fig.suptitle(f"toolfan soak: {soak['info']['started']}", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
