"""The curves as a picture: one panel per curve, and one for Redis memory per saved call.

Drawn from ``curves.json``'s document, not from live objects, so a saved run can be
drawn again. Throughput is solid on the left axis, p95 dashed on the right; each
toolfan point is labelled with its throughput ratio to raw Celery.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.figures import RAW, SYSTEMS, TOOLFAN
from bench.plot import COLOURS


def draw(doc: dict[str, Any], path: Path) -> None:
    """Write the PNG (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = list(doc["curves"].values())
    memory = [c for c in curves if any("memory" in p for p in c["points"])]
    panels = len(curves) + len(memory)
    rows = math.ceil(panels / 2)
    fig, axes = plt.subplots(rows, 2, figsize=(15, 6.2 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax, curve in zip(flat, curves, strict=False):
        _curve(ax, curve)
    for ax, curve in zip(flat[len(curves) :], memory, strict=False):
        _memory(ax, curve)
    for ax in flat[panels:]:
        ax.set_visible(False)
    info = doc["info"]
    fig.suptitle(
        f"toolfan cost curves vs raw Celery: {info.get('cpus', '?')} CPUs, poll interval "
        f"{info.get('poll_interval', '?')} s, {info.get('started', '')}",
        fontsize=12,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _x_axis(ax: Any, xs: list[int], label: str) -> None:
    if len(xs) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(f"{label} (log scale)" if len(xs) > 1 else label)


def _curve(ax: Any, curve: dict[str, Any]) -> None:
    """Calls/s of both systems (solid, left), their p95 (dashed, right), ratios as labels."""
    points = curve["points"]
    xs = [p["x"] for p in points]
    twin = ax.twinx()
    for system in (TOOLFAN, RAW):
        colour = COLOURS[system]
        rates = [p[system]["calls_per_s"] for p in points]
        p95s = [p[system]["latency"]["p95"] for p in points]
        ax.plot(xs, rates, "o-", color=colour, label=f"{SYSTEMS[system]} calls/s")
        twin.plot(xs, p95s, "s--", color=colour, alpha=0.7, label=f"{SYSTEMS[system]} p95")
    for p in points:
        value = p["throughput_vs_raw_celery"]
        if value is not None:
            ax.annotate(
                f"{value:.2f}x",
                (p["x"], p[TOOLFAN]["calls_per_s"]),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize=8,
                color=COLOURS[TOOLFAN],
            )
    _x_axis(ax, xs, curve["axis"])
    ax.set_ylim(bottom=0)
    twin.set_ylim(bottom=0)
    ax.set_ylabel("calls per second (solid)")
    twin.set_ylabel("p95 seconds to answer (dashed)")
    ax.set_title(_wrap(curve["title"]), fontsize=10)
    handles = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    # Below the panel: inside, it would hide the points of one axis or the other.
    ax.legend(
        handles[0] + more[0],
        handles[1] + more[1],
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=4,
    )


def _memory(ax: Any, curve: dict[str, Any]) -> None:
    """Bytes per saved call: the ``used_memory`` delta (solid) and the keys' own (dashed)."""
    points = [p for p in curve["points"] if "memory" in p]
    xs = [p["x"] for p in points]
    lowest = 0.0
    for system in (TOOLFAN, RAW):
        colour = COLOURS[system]
        used = [p["memory"][system]["bytes_per_call"] for p in points]
        keys = [p["memory"][system]["key_bytes_per_call"] for p in points]
        ax.plot(xs, used, "o-", color=colour, label=f"{SYSTEMS[system]}: used_memory delta")
        ax.plot(xs, keys, "s--", color=colour, alpha=0.7, label=f"{SYSTEMS[system]}: its keys")
        lowest = min(lowest, *used)
    _x_axis(ax, xs, curve["axis"])
    # A delta can be negative on a tiny run (buffers freed): keep it in view, not clipped.
    ax.set_ylim(bottom=min(0.0, lowest * 1.1))
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_ylabel("Redis bytes per saved call")
    ax.set_title("Redis memory per saved call (results kept until their TTL)", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)


def _wrap(text: str, width: int = 80) -> str:
    """Break a long title at a word near ``width`` characters."""
    if len(text) <= width:
        return text
    cut = text.rfind(" ", 0, width)
    return f"{text[:cut]}\n{text[cut + 1 :]}" if cut > 0 else text
