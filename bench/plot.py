"""The run as a picture: throughput per workload, and latency percentiles per workload."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.figures import SYSTEMS, Measurement
from bench.report import Report

COLOURS = {
    "toolfan": "#1f77b4",
    "assistants": "#17becf",
    "raw_celery": "#7f7f7f",
    "raw_ledger": "#bcbd22",
    "floor": "#8c564b",
    "runs_floor": "#c49c94",
    "threads": "#2ca02c",
    "loop": "#d62728",
}
PERCENTILES = ("p50", "p95", "p99")


def _formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(_seconds)


def draw(report: Report, path: Path) -> None:
    """Write a two-panel PNG (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 6), width_ratios=(1, 1.6))
    _throughput(left, report)
    _latency(right, report)
    info = report.info
    fig.suptitle(
        f"toolfan bench: {info.get('cpus', '?')} CPUs, poll interval "
        f"{info.get('poll_interval', '?')} s, {info.get('started', '')}",
        fontsize=12,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _throughput(ax: Any, report: Report) -> None:
    """Grouped bars, calls/s on a log scale, value printed on each bar."""
    workloads = list(report.results)
    width = 0.8 / len(SYSTEMS)
    for i, system in enumerate(SYSTEMS):
        xs, ys = [], []
        for j, workload in enumerate(workloads):
            m = report.get(workload, system)
            if m is not None and math.isfinite(m.calls_per_s):
                xs.append(j + (i - (len(SYSTEMS) - 1) / 2) * width)
                ys.append(m.calls_per_s)
        bars = ax.bar(xs, ys, width, label=SYSTEMS[system], color=COLOURS[system])
        ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    ax.set_xticks(range(len(workloads)), [_workload_label(report, w) for w in workloads])
    ax.set_yscale("log")
    ax.set_ylabel("calls per second (log scale)")
    ax.set_title("Throughput: higher is better")
    ax.legend(fontsize=9)


def _workload_label(report: Report, workload: str) -> str:
    shape = report.info.get("workloads", {}).get(workload, {})
    if not shape:
        return workload
    workers = shape.get("workers", 1)
    return (
        f"{workload}: {shape['sessions']} x {shape['calls']} calls\n"
        f"{workers if workers > 1 else ''}{'x ' if workers > 1 else ''}"
        f"{shape['pool'] or 'default worker'}"
        f"{' -c ' + str(shape['concurrency']) if shape['concurrency'] else ''}"
    )


def _latency(ax: Any, report: Report) -> None:
    """p50/p95/p99 of time to answer per (workload, system), plus the half-load run."""
    groups: list[tuple[str, dict[str, float], str]] = [
        (_group_label(by_system[s], _most(by_system)), by_system[s].latency, COLOURS[s])
        for by_system in report.results.values()
        for s in SYSTEMS
        if s in by_system
    ]
    if report.half_load:
        groups.append(("noop toolfan,\nhalf of peak", report.half_load["latency"], "#9467bd"))
    width, shades = 0.27, (1.0, 0.65, 0.35)
    for k, name in enumerate(PERCENTILES):
        xs = [i + (k - 1) * width for i in range(len(groups))]
        ys = [g[1][name] for g in groups]
        colours = [_shade(g[2], shades[k]) for g in groups]
        bars = ax.bar(xs, ys, width, color=colours, edgecolor="black", linewidth=0.4)
        ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1, rotation=90)
        ax.bar(0, 0, 0, color=_shade("#555555", shades[k]), edgecolor="black", label=name)
    if report.half_load:
        target, last = report.half_load["target_p95"], len(groups) - 1
        ax.hlines(target, last - 0.5, last + 0.5, color="#9467bd", linestyle="--", linewidth=1.5)
        label = f"p95 target {target:.2f} s"
        ax.text(last + 0.5, target * 1.04, label, fontsize=7, color="#9467bd", ha="right")
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_formatter())
    ax.yaxis.set_minor_formatter(_formatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel("seconds from pending to answered (log scale)")
    ax.set_title("Time to answer (bar shades: p50, p95, p99): lower is better")
    ax.legend(fontsize=8, loc="upper left")


def _group_label(m: Measurement, sessions: int) -> str:
    """Workload and system, plus the session count when it is not the workload's (loop)."""
    label = f"{m.workload}\n{SYSTEMS[m.system]}"
    return label if m.sessions == sessions else f"{label}\n({m.sessions} sessions)"


def _most(by_system: dict[str, Measurement]) -> int:
    return max(m.sessions for m in by_system.values())


def _seconds(value: float, position: int) -> str:
    return f"{value:g}"


def _shade(colour: str, factor: float) -> tuple[float, float, float]:
    """The colour mixed with white: darker bars for lower percentiles stay legible."""
    r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return (1 - (1 - r) * factor, 1 - (1 - g) * factor, 1 - (1 - b) * factor)
