"""The run's results: the table, the target lines, and the JSON document."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.figures import (
    ASSISTANTS,
    BUSIEST_WINDOW,
    FLOOR,
    LOOP,
    RAW,
    RAW_LEDGER,
    RUNS_FLOOR,
    SPLIT,
    SYSTEMS,
    THREADS,
    TOOLFAN,
    Measurement,
    ratio,
)

Results = dict[str, dict[str, Measurement]]
#: Poller CPU seconds one pass over 100,000 idle sessions may take (scaled to the count).
IDLE_CPU_PER_100K = 10.0


@dataclass(frozen=True)
class Target:
    """One of the issue's targets, evaluated: what was measured against what was wanted.

    ``sign`` is ``>=``, ``<=``, ``<`` or ``==`` (measured against ``limit``).
    """

    name: str
    measured: float | None
    sign: str
    limit: float
    detail: str

    @property
    def passed(self) -> bool:
        """Whether the measurement meets the target (a missing one does not)."""
        if self.measured is None or math.isnan(self.measured):
            return False
        if self.sign == ">=":
            return self.measured >= self.limit
        if self.sign == "<=":
            return self.measured <= self.limit
        if self.sign == "<":
            return self.measured < self.limit
        return self.measured == self.limit

    def line(self) -> str:
        """``PASS``/``FAIL``, the target, and the measured value."""
        verdict = "PASS" if self.passed else "FAIL"
        value = "n/a" if self.measured is None else f"{self.measured:.3g}"
        return f"{verdict}  {self.name}: {value} (target {self.sign} {self.limit:g}; {self.detail})"

    def to_json(self) -> dict[str, Any]:
        """The target as data."""
        return {
            "name": self.name,
            "measured": self.measured,
            "sign": self.sign,
            "limit": self.limit,
            "passed": self.passed,
            "detail": self.detail,
        }


@dataclass
class Report:
    """Everything one run measured."""

    results: Results = field(default_factory=dict)
    idle: dict[str, Any] = field(default_factory=dict)
    half_load: dict[str, Any] = field(default_factory=dict)
    push_load: dict[str, Any] = field(default_factory=dict)
    #: The same, at half of the pushed peak (``peak_calls_per_s``) rather than the polled.
    push_own: dict[str, Any] = field(default_factory=dict)
    inline: dict[str, Any] = field(default_factory=dict)
    features: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    spread: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, workload: str, system: str) -> Measurement | None:
        """One measurement, if it was taken."""
        return self.results.get(workload, {}).get(system)

    def ratios(self, workload: str, system: str = TOOLFAN) -> dict[str, float | None]:
        """Ratios of toolfan (or ``system``) to each baseline: throughput, Redis, CPU per call."""
        ours = self.get(workload, system)
        out: dict[str, float | None] = {}
        for base in (RAW, RAW_LEDGER, FLOOR, RUNS_FLOOR, THREADS, LOOP):
            other = self.get(workload, base)
            if ours is None or other is None:
                continue
            out[f"throughput_vs_{base}"] = ratio(ours.calls_per_s, other.calls_per_s)
            out[f"cpu_vs_{base}"] = ratio(ours.cpu_seconds_per_call, other.cpu_seconds_per_call)
            out[f"redis_vs_{base}"] = ratio(
                ours.redis_commands_per_call, other.redis_commands_per_call
            )
        return out

    def system_ratios(self) -> dict[str, dict[str, dict[str, float | None]]]:
        """:meth:`ratios` of every measured toolfan row (sessions, runs), by workload."""
        return {
            w: {s: self.ratios(w, s) for s in (TOOLFAN, ASSISTANTS) if s in by_system}
            for w, by_system in self.results.items()
        }

    def targets(self) -> list[Target]:
        """The issue's targets, each with its measured ratio or value."""
        return [*self._throughput_targets(), *self._redis_targets(), *self._other_targets()]

    def _throughput_targets(self) -> Iterator[Target]:
        noop, io = self.ratios("noop"), self.ratios("io")
        io_info = self.info.get("workloads", {}).get("io", {})
        pool = (
            f"{io_info.get('workers', 1)} x {io_info.get('concurrency', '?')} "
            f"{io_info.get('pool', 'threads')}"
        )
        yield Target(
            "no-op throughput / raw Celery",
            noop.get(f"throughput_vs_{RAW}"),
            ">=",
            0.9,
            f"calls/s, default worker; per repetition {self._pairs('noop')}"
            + self._ceiling("noop", FLOOR, 0.9),
        )
        if self.get("noop", ASSISTANTS) is not None:
            yield Target(
                "no-op throughput, assistants source / raw Celery",
                self.ratios("noop", ASSISTANTS).get(f"throughput_vs_{RAW}"),
                ">=",
                0.9,
                "calls/s, watched runs, same workers; per repetition "
                f"{self._pairs('noop', ASSISTANTS)}" + self._ceiling("noop", RUNS_FLOOR, 0.9),
            )
        yield Target(
            "50 ms I/O throughput / sequential loop",
            io.get(f"throughput_vs_{LOOP}"),
            ">=",
            25,
            f"calls/s, {pool} pool",
        )
        yield Target(
            "50 ms I/O throughput / raw Celery",
            io.get(f"throughput_vs_{RAW}"),
            ">=",
            0.9,
            f"calls/s, same {pool} pool; per repetition {self._pairs('io')}"
            + self._ceiling("io", FLOOR, 0.9),
        )

    def _pairs(self, workload: str, system: str = TOOLFAN) -> str:
        ratios = self.spread.get(workload, {}).get(f"{system}_vs_{RAW}", [])
        return "[" + ", ".join(f"{r:.2f}" for r in ratios) + "]"

    def _ceiling(self, workload: str, floor: str, target: float) -> str:
        """What the floor reached against raw Celery in this run, for a throughput target.

        The floor does only what no implementation can do without, so where it falls
        short of the target, the run itself shows the target out of any implementation's
        reach on this machine at that moment. It is said only when both readings fall
        short: the ratio of the median repetitions (as the target is read) and the median
        of the paired repetitions' ratios (one slow repetition of either side moves the
        first alone).
        """
        reached, raw = self.get(workload, floor), self.get(workload, RAW)
        if reached is None or raw is None:
            return ""
        share = ratio(reached.calls_per_s, raw.calls_per_s)
        pairs = self.spread.get(workload, {}).get(f"{floor}_vs_{RAW}", [])
        shown = f"{_fmt(share, digits=2)} per repetition {self._pairs(workload, floor)}"
        text = f"; {SYSTEMS[floor]}: {shown}"
        readings = [share, statistics.median(pairs) if pairs else None]
        if all(r is not None and r < target for r in readings):
            text += ", under the target: the least any implementation does fell short of it here"
        return text

    def _redis_targets(self) -> Iterator[Target]:
        for workload in self.results:
            yield Target(
                f"Redis commands per call / raw Celery per task ({workload})",
                self.ratios(workload).get(f"redis_vs_{RAW}"),
                "<=",
                1.1,
                "INFO commandstats deltas",
            )
            yield Target(
                f"CPU per call / raw Celery per task ({workload})",
                self.ratios(workload).get(f"cpu_vs_{RAW}"),
                "<=",
                1.15,
                "workers and poller vs workers and publisher; the API's CPU is not counted",
            )

    def _other_targets(self) -> Iterator[Target]:
        yield from self._inline_targets()
        yield from self._feature_targets()
        idle = self.idle
        if idle:
            wanted = math.ceil(idle["sessions"] / 100)
            yield Target(
                f"list requests per pass over {idle['sessions']:,} idle sessions",
                float(max(idle["list_requests"])),
                "==",
                wanted,
                f"100 sessions a page; passes: {idle['list_requests']}",
            )
            limit = IDLE_CPU_PER_100K * idle["sessions"] / 100_000
            yield Target(
                f"poller CPU per pass over {idle['sessions']:,} idle sessions",
                idle["cpu_seconds_median"],
                "<",
                limit,
                "seconds, median of the passes (10 s per 100,000 sessions)",
            )
        half = self.half_load
        if half:
            yield Target(
                "p95 time to answer at half of peak load",
                half["latency"]["p95"],
                "<=",
                half["target_p95"],
                f"seconds = poll interval + 0.25 s; {half['rate_calls_per_s']:.0f} calls/s; "
                f"{_runs(half)}; {_cpu(half)}",
            )
        if self.push_load:
            yield _push_target("half of peak load", self.push_load)
        if self.push_own:
            yield _push_target("half of the pushed peak", self.push_own)

    def _feature_targets(self) -> Iterator[Target]:
        unused = self.features.get("unused")
        if not unused:
            return
        spread = unused["throughput_spread"]
        yield Target(
            "policy and approval check when unused, share of CPU per call",
            unused["share_of_cpu_per_call"],
            "<",
            spread if spread is not None else math.nan,
            f"{unused['check_seconds_per_call'] * 1e6:.2f} us per call in-process against "
            f"{unused['cpu_seconds_per_call'] * 1e3:.2f} ms; the limit is the no-op rows' "
            "run-to-run throughput spread",
        )

    def _inline_targets(self) -> Iterator[Target]:
        """``run_tool_calls``: throughput against raw Celery's chords, and two latencies."""
        rows, raw = self.inline.get("throughput"), self.get("noop", RAW)
        if rows and raw is not None:
            m = rows["median"]
            pairs = zip(rows["calls_per_s"], self.spread.get("noop", {}).get(RAW, []), strict=False)
            shown = ", ".join(f"{ours / theirs:.2f}" for ours, theirs in pairs)
            yield Target(
                "run_tool_calls no-op throughput / raw Celery",
                ratio(m["calls_per_s"], raw.calls_per_s),
                ">=",
                0.9,
                f"{m['calls_per_s']:,.0f} calls/s from {m['extra']['callers']} caller threads; "
                f"per repetition [{shown}]; workers' CPU "
                f"{_fmt(m['cpu_seconds_per_call'], 1000, 3)} ms/call, callers' "
                f"{_fmt(m['extra']['caller_cpu_seconds_per_call'], 1000, 3)} ms/call; "
                f"{_fmt(m['redis_commands_per_call'])} Redis commands/call",
            )
        single = self.inline.get("single_call")
        if single:
            yield Target(
                "one no-op run_tool_calls p50 over an in-process call",
                single["overhead_p50"] * 1000,
                "<=",
                5,
                f"ms, warm fleet, {single['samples']} sequential calls; p50 "
                f"{_fmt(single['run_tool_calls']['p50'], 1000, 2)} ms, p95 "
                f"{_fmt(single['run_tool_calls']['p95'], 1000, 2)} ms; raw Celery's chord of one "
                f"p50 {_fmt(single['raw_celery_chord']['p50'], 1000, 2)} ms, one bare task and "
                f"its result {_fmt(single['raw_celery_task']['p50'], 1000, 2)} ms",
            )
        parallel = self.inline.get("parallel")
        if parallel:
            yield Target(
                f"{parallel['calls_per_answer']} x {parallel['tool_ms']} ms run_tool_calls p50",
                parallel["latency"]["p50"] * 1000,
                "<=",
                80,
                f"ms, {parallel['pool']} pool, {parallel['samples']} answers; p95 "
                f"{_fmt(parallel['latency']['p95'], 1000, 1)} ms; raw Celery's chord of "
                f"{parallel['calls_per_answer']} p50 "
                f"{_fmt(parallel['raw_celery_chord']['p50'], 1000, 1)} ms",
            )

    def to_json(self) -> dict[str, Any]:
        """The whole report as a JSON-ready dict."""
        return {
            "info": self.info,
            "workloads": {
                w: {s: m.to_json() for s, m in by_system.items()}
                for w, by_system in self.results.items()
            },
            "ratios": {w: self.ratios(w) for w in self.results},
            "ratios_by_system": self.system_ratios(),
            "spread": self.spread,
            "idle": self.idle,
            "half_load": self.half_load,
            "push_load": self.push_load,
            "push_own": self.push_own,
            "inline": self.inline,
            "features": self.features,
            "targets": [t.to_json() for t in self.targets()],
        }

    def write(self, path: Path) -> None:
        """Write the JSON (NaN becomes null, so any JSON reader takes it)."""
        path.write_text(json.dumps(_no_nan(self.to_json()), indent=2) + "\n")


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def _list(values: list[float]) -> str:
    """Values, their median and their spread (max - min) as a share of the median."""
    middle = statistics.median(values)
    share = (max(values) - min(values)) / middle if middle else math.nan
    shown = ", ".join(f"{v:,.0f}" for v in values)
    return f"[{shown}], median {middle:,.0f}, spread {share:.0%}"


def _push_target(load: str, push: dict[str, Any]) -> Target:
    """The push latency target of one pushed half-load run."""
    return Target(
        f"p95 from push to accepted batch at {load}",
        push["latency"]["p95"],
        "<=",
        push["target_p95"],
        f"seconds (no-op tools); p50 {_fmt(push['latency']['p50'], digits=3)}, p99 "
        f"{_fmt(push['latency']['p99'], digits=3)}; {push['pushed']} of "
        f"{push['sessions']} pushed; {push['rate_calls_per_s']:.0f} calls/s; p95 push to "
        f"retrieve {_fmt(push['push_to_retrieve']['p95'], digits=3)}, retrieve to "
        f"accepted {_fmt(push['retrieve_to_accepted']['p95'], digits=3)}; {_runs(push)}; "
        f"{_cpu(push)}",
    )


def _runs(phase: dict[str, Any]) -> str:
    """Which run of a repeated latency phase is shown, and every run's p95 (the spread)."""
    p95s = phase.get("p95_per_repetition")
    if not p95s:
        return "one run"
    shown = ", ".join(_fmt(p, digits=3) for p in p95s)
    text = f"the median of {len(p95s)} runs by p95, p95 per run [{shown}]"
    busiest = phase.get("busiest_calls_per_s_per_repetition")
    if busiest:
        rates = ", ".join(f"{b:.0f}" for b in busiest)
        window = phase.get("busiest_window_s", BUSIEST_WINDOW)
        text += f", the busiest {window:g} s of arrivals per run [{rates}] calls/s"
    return text


def _cpu(phase: dict[str, Any]) -> str:
    """A half-load run's CPU per call: toolfan's processes, the API stand-in's, Redis's."""
    cpu = phase.get("cpu_ms_per_call")
    if not cpu:
        return "CPU per call not measured"
    redis = f", Redis's {cpu['redis']:.2f} ms" if cpu.get("redis") else ""
    return f"CPU per call {cpu['toolfan']:.2f} ms (+ the API's {cpu['emulator']:.2f} ms{redis})"


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * scale:,.{digits}f}"


HEADER = (
    f"{'workload':<8} {'system':<16} {'calls':>6} {'calls/s':>9} {'sess/s':>8} "
    f"{'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'req/poll':>8} {'redis/call':>10} "
    f"{'cpu ms/call':>11}"
)


def row(m: Measurement) -> str:
    """One table row."""
    return (
        f"{m.workload:<8} {SYSTEMS[m.system]:<16} {m.calls:>6} {_fmt(m.calls_per_s):>9} "
        f"{_fmt(m.sessions_per_s):>8} {_fmt(m.latency['p50'], digits=2):>7} "
        f"{_fmt(m.latency['p95'], digits=2):>7} {_fmt(m.latency['p99'], digits=2):>7} "
        f"{_fmt(m.api_requests_per_poll, digits=2):>8} "
        f"{_fmt(m.redis_commands_per_call, digits=1):>10} "
        f"{_fmt(m.cpu_seconds_per_call, 1000, 2):>11}"
    )


def lines(report: Report) -> list[str]:
    """The printed report: table, ratios, idle and half-load figures, targets."""
    out = [HEADER, "-" * len(HEADER)]
    for by_system in report.results.values():
        out += [row(by_system[s]) for s in SYSTEMS if s in by_system]
    out.append("")
    for workload in report.results:
        parts = [f"{k} {_fmt(v, digits=2)}" for k, v in report.ratios(workload).items()]
        out.append(f"toolfan / baseline ({workload}): " + ", ".join(parts))
        if report.get(workload, ASSISTANTS) is not None:
            ours = report.ratios(workload, ASSISTANTS)
            parts = [f"{k} {_fmt(v, digits=2)}" for k, v in ours.items() if RAW in k]
            out.append(f"{SYSTEMS[ASSISTANTS]} / baseline ({workload}): " + ", ".join(parts))
    out += ledger_lines(report)
    out += floor_lines(report)
    out += runs_floor_lines(report)
    out.append("")
    for workload, runs in report.spread.items():
        for system in SYSTEMS:
            if runs.get(system):
                out.append(
                    f"{workload} {SYSTEMS[system]}: calls/s per repetition " + _list(runs[system])
                )
    out += split_lines(report)
    out += load_split_lines(report)
    out += feature_lines(report.features)
    out += idle_lines(report.idle)
    out.append("")
    out += [t.line() for t in report.targets()]
    return out


#: What each in-between baseline is, after its line against raw Celery.
BASELINE_NOTES = {
    RAW_LEDGER: "each task also runs the ledger's begin and finish, and nothing else of toolfan",
    FLOOR: "only the list pass, one ledger write per call and one POST per batch: "
    "no implementation of the contract does less",
    RUNS_FLOOR: "only two reads per run (one finds it waiting, one after its submit sees "
    "whether it goes on), one ledger write per call and one submit per run: no implementation "
    "of the runs source does less",
}


def ledger_lines(report: Report) -> list[str]:
    """What the ledger alone costs raw Celery, and toolfan against raw Celery with it."""
    return [line for w in report.results for line in _between_lines(report, w, RAW_LEDGER)]


def floor_lines(report: Report) -> list[str]:
    """The floor against raw Celery (the ceiling of any correct implementation), and toolfan."""
    return [line for w in report.results for line in _between_lines(report, w, FLOOR)]


def runs_floor_lines(report: Report) -> list[str]:
    """The runs floor against raw Celery (the runs source's ceiling), and toolfan's runs row."""
    return [
        line
        for w in report.results
        for line in _between_lines(report, w, RUNS_FLOOR, ASSISTANTS)
        if report.get(w, ASSISTANTS) is not None
    ]


def _between_lines(report: Report, workload: str, base: str, system: str = TOOLFAN) -> list[str]:
    """A baseline between raw Celery and ``system``: its ratio to raw Celery, ``system``'s to it."""
    between, raw = report.get(workload, base), report.get(workload, RAW)
    if between is None or raw is None:
        return []
    pairs = report.spread.get(workload, {})
    ours = report.ratios(workload, system)
    return [
        f"{SYSTEMS[base]} / raw Celery ({workload}): throughput "
        f"{_fmt(ratio(between.calls_per_s, raw.calls_per_s), digits=2)} "
        f"{_ratios(pairs.get(f'{base}_vs_{RAW}', []))}, CPU "
        f"{_fmt(ratio(between.cpu_seconds_per_call, raw.cpu_seconds_per_call), digits=2)} "
        f"({BASELINE_NOTES[base]})",
        f"{SYSTEMS[system]} / {SYSTEMS[base]} ({workload}): throughput "
        f"{_fmt(ours.get(f'throughput_vs_{base}'), digits=2)} "
        f"{_ratios(pairs.get(f'{system}_vs_{base}', []))}, CPU "
        f"{_fmt(ours.get(f'cpu_vs_{base}'), digits=2)}",
    ]


def _ratios(values: list[float]) -> str:
    """Per-repetition ratios, as the targets print them."""
    return "per repetition [" + ", ".join(f"{v:.2f}" for v in values) + "]"


def split_lines(report: Report) -> list[str]:
    """CPU per call by process, for the workloads on the worker's default (prefork) pool.

    Under a threads pool the main process does all the work, so its split says nothing.
    """
    out = []
    shapes = report.info.get("workloads", {})
    for workload, by_system in report.results.items():
        if shapes.get(workload, {}).get("pool") is not None:
            continue
        for system in SYSTEMS:
            split = by_system[system].extra.get(SPLIT) if system in by_system else None
            if split:
                parts = ", ".join(f"{k} {v:.2f}" for k, v in split.items())
                out.append(f"{workload} {SYSTEMS[system]}: CPU ms per call by process: {parts}")
    return ["", *out] if out else []


#: The half-load phases, each with what its line calls it.
LOAD_PHASES = {
    "half_load": "half of peak, polled",
    "push_load": "half of the polled peak, pushed",
    "push_own": "half of the pushed peak, pushed",
}


def load_split_lines(report: Report) -> list[str]:
    """CPU per call by process in the half-load runs: where a push costs more than a poll."""
    out = []
    for key, label in LOAD_PHASES.items():
        split = (getattr(report, key) or {}).get(SPLIT)
        if split:
            parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(split.items()))
            out.append(f"{label}: CPU ms per call by process: {parts}")
    return ["", *out] if out else []


def idle_lines(idle: dict[str, Any]) -> list[str]:
    """The steady cost of one idle session an hour, with webhooks and the 60 s poll."""
    hourly = idle.get("per_session_per_hour_with_webhooks")
    if not hourly:
        return []
    return [
        "",
        f"one idle session an hour, with webhooks and a 60 s safety-net poll: "
        f"{hourly['list_requests']:.2f} list requests, "
        f"{hourly['poller_cpu_seconds'] * 1e3:.2f} ms of poller CPU, "
        f"{hourly['redis_commands']:.2f} Redis commands, no webhook deliveries "
        f"(from {idle['sessions']:,} idle sessions, {idle['passes']} passes)",
    ]


def feature_lines(features: dict[str, Any]) -> list[str]:
    """What a policy and an approval cost per call in use, against plain runs between."""
    out = []
    for name in ("policy", "approval"):
        used = features.get(name)
        if not used:
            continue
        out.append(
            f"{name} in use ({used['tool']}, {used['runs']} x {used['calls']} calls): "
            f"{used['extra_cpu_ms_per_call']:+.3f} ms CPU and "
            f"{used['extra_redis_commands_per_call']:+.1f} Redis commands per call "
            f"({used['cpu_ms_per_call']:.3f} against {used['plain_cpu_ms_per_call']:.3f} ms, "
            f"{used['redis_commands_per_call']:.1f} against "
            f"{used['plain_redis_commands_per_call']:.1f}); p50 "
            f"{used['latency_p50']:.2f} s against {used['plain_latency_p50']:.2f} s"
        )
    return ["", *out] if out else []
