"""The bench: the whole run, phase by phase, then the table, JSON and PNG."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from bench.assistants import measure_assistants
from bench.config import BenchConfig, Workload
from bench.emu import Emulator
from bench.engine import run_raw, run_toolfan
from bench.features import run_features
from bench.figures import (
    ASSISTANTS,
    FLOOR,
    LOOP,
    RAW,
    RAW_LEDGER,
    RUNS_FLOOR,
    THREADS,
    TOOLFAN,
    Measurement,
)
from bench.floor import run_floor
from bench.inline import run_inline
from bench.inprocess import run_inprocess
from bench.measure import cpu_ticks, foreign_clients, machine, stolen_share
from bench.phases import repeated, run_half_load, run_idle, run_push_load, run_push_peak
from bench.plot import draw
from bench.report import Report, lines
from bench.stack import BenchStack
from dispatcher.devstack import Service

#: Sessions of the warm-up passes, whose figures are thrown away.
WARM_UP = 4


def say(text: str) -> None:
    """Progress on stderr; the report itself goes to stdout."""
    print(f"bench: {text}", file=sys.stderr, flush=True)


def use_stack_env(env: dict[str, str]) -> None:
    """Make this process a client of the bench stack (its Celery app, ledger, API URL).

    Raises:
        RuntimeError: toolfan's Celery app is already configured in this process, so it
            would publish to another broker than the bench's workers consume.
    """
    if "tasks.app" in sys.modules:
        raise RuntimeError("the bench must run in its own process (tasks.app is loaded)")
    for key in [k for k in os.environ if k.startswith(("TOOLFAN_", "OPENAI_"))]:
        del os.environ[key]
    os.environ.update({k: v for k, v in env.items() if k.startswith(("TOOLFAN_", "OPENAI_"))})


def run_workload(stack: BenchStack, emu: Emulator, workload: Workload, report: Report) -> None:
    """Measure raw Celery and toolfan in turn on the same workers; then the other rows.

    Each throughput is measured ``--reps`` times: the table shows the median repetition,
    and the report keeps every one (the spread). Raw Celery and toolfan alternate, one
    repetition each, so a machine that speeds up or slows down during the run moves both
    alike and each pair's ratio stays fair; raw Celery runs while no poller runs, so no poll
    pass lands in its CPU or Redis counts. The floor (:mod:`bench.floor`), paired the same
    way, runs with no poller too: it lists the sessions itself.
    """
    config = stack.config
    runs: dict[str, list[Measurement]] = {RAW: [], FLOOR: [], TOOLFAN: []}
    if workload.name == "noop":  # what the ledger alone costs raw Celery's chords
        runs[RAW_LEDGER] = []
    with stack.workers(workload) as workers:
        size = f"{workload.sessions} x {workload.calls}"
        say(f"{workload.name}: raw Celery and toolfan in turn, {size}")
        run_raw(stack, workload, workers, WARM_UP)
        if RAW_LEDGER in runs:
            run_raw(stack, workload, workers, WARM_UP, ledger=True)
        run_floor(stack, emu, workload, workers, WARM_UP)
        for _ in range(config.reps):
            runs[RAW].append(repeat(run_raw, stack, workload, workers))
            if RAW_LEDGER in runs:
                runs[RAW_LEDGER].append(repeat(run_raw, stack, workload, workers, None, True))
            runs[FLOOR].append(repeat(run_floor, stack, emu, workload, workers))
            with stack.poller() as poller:
                run_toolfan(stack, emu, workload, (workers, poller), WARM_UP)
                runs[TOOLFAN].append(repeat(run_toolfan, stack, emu, workload, (workers, poller)))
        run_inline(stack, workload, workers, report.inline, say)
        peak = median(runs[TOOLFAN]).calls_per_s
        if workload.name == "noop":
            run_noop_phases(stack, emu, workload, (workers, peak), runs, report)
    for system in (THREADS, LOOP):
        say(f"{workload.name}: in-process {system}")
        runs[system] = [
            run_inprocess(system, emu, stack.origin, workload, config.timeout)
            for _ in range(config.reps)
        ]
    report.results[workload.name] = {system: median(ms) for system, ms in runs.items()}
    report.spread[workload.name] = spread(runs)


def run_noop_phases(
    stack: BenchStack,
    emu: Emulator,
    workload: Workload,
    fleet: tuple[list[Service], float],
    runs: dict[str, list[Measurement]],
    report: Report,
) -> None:
    """On the no-op workers: half of peak load, the features, the runs row, the pushes.

    ``fleet`` is the running workers and toolfan's peak throughput (calls/s) on them.
    """
    workers, peak = fleet
    half, reps = stack.config.half_load_seconds, stack.config.reps
    with stack.poller() as poller:
        run_toolfan(stack, emu, workload, (workers, poller), WARM_UP)
        say(f"half of peak load: {peak / 2:.0f} calls/s for {half:g} s, {reps} times")
        report.half_load = repeated(
            lambda rep: run_half_load(stack, emu, workload, peak, rep), reps
        )
        say("policies and approvals: unused, then in use")
        report.features = run_features(stack, emu, workload, (workers, poller), runs[TOOLFAN])
    say(f"noop: toolfan runs, {workload.sessions} runs x {workload.calls} (assistants)")
    runs[ASSISTANTS], runs[RUNS_FLOOR] = measure_assistants(stack, emu, workload, workers, WARM_UP)
    say(f"pushed: the peak, then half of the polled peak ({peak / 2:.0f} calls/s) and of its own")
    with stack.pusher() as intake:
        # The peak first, as for polling (its throughput runs come before its half load):
        # the half-load runs then start on a push path that has already carried load.
        pushed_peak = run_push_peak(stack, emu, workload, intake)
        say(f"pushed peak {pushed_peak:.0f} calls/s; half of the polled peak, pushed, {reps} times")
        report.push_load = repeated(
            lambda rep: run_push_load(stack, emu, workload, (peak, intake), rep), reps
        )
        say(f"half of the pushed peak: {pushed_peak / 2:.0f} calls/s through the intake")
        report.push_own = repeated(
            lambda rep: run_push_load(stack, emu, workload, (pushed_peak, intake), rep), reps
        )
        report.push_own["peak_calls_per_s"] = pushed_peak


def repeat(measure: Callable[..., Measurement], *args: Any) -> Measurement:
    """One repetition, with a line of progress."""
    m = measure(*args)
    say(f"  {m.workload} {m.system}: {m.calls_per_s:,.0f} calls/s")
    return m


def median(measurements: list[Measurement]) -> Measurement:
    """The repetition of median throughput (the lower middle one of an even count)."""
    ranked = sorted(measurements, key=lambda m: m.calls_per_s)
    return ranked[(len(ranked) - 1) // 2]


def spread(runs: dict[str, list[Measurement]]) -> dict[str, Any]:
    """Every repetition's calls/s per system, and toolfan's ratio to raw Celery in each pair."""
    out: dict[str, Any] = {s: [m.calls_per_s for m in ms] for s, ms in runs.items()}
    pairs = zip(runs.get(TOOLFAN, []), runs.get(RAW, []), strict=False)
    out["toolfan_vs_raw_celery"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
    if ASSISTANTS in runs:
        pairs = zip(runs[ASSISTANTS], runs.get(RAW, []), strict=False)
        out[f"{ASSISTANTS}_vs_raw_celery"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
    if RUNS_FLOOR in runs:
        pairs = zip(runs[RUNS_FLOOR], runs.get(RAW, []), strict=False)
        out[f"{RUNS_FLOOR}_vs_raw_celery"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
        pairs = zip(runs.get(ASSISTANTS, []), runs[RUNS_FLOOR], strict=False)
        out[f"{ASSISTANTS}_vs_{RUNS_FLOOR}"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
    if RAW_LEDGER in runs:
        pairs = zip(runs[RAW_LEDGER], runs.get(RAW, []), strict=False)
        out[f"{RAW_LEDGER}_vs_raw_celery"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
        pairs = zip(runs.get(TOOLFAN, []), runs[RAW_LEDGER], strict=False)
        out[f"toolfan_vs_{RAW_LEDGER}"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
    if FLOOR in runs:
        pairs = zip(runs[FLOOR], runs.get(RAW, []), strict=False)
        out[f"{FLOOR}_vs_raw_celery"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
        pairs = zip(runs.get(TOOLFAN, []), runs[FLOOR], strict=False)
        out[f"toolfan_vs_{FLOOR}"] = [t.calls_per_s / r.calls_per_s for t, r in pairs]
    return out


def describe(config: BenchConfig) -> dict[str, Any]:
    """What the figures were measured on and with."""
    return {
        **machine(),
        "poll_interval": config.poll_interval,
        "reps": config.reps,
        "quick": config.quick,
        "seed": config.seed,
        "private_redis": config.private_redis,
        "databases": {"broker": config.broker_db, "ledger": config.ledger_db},
        "workloads": {
            w.name: {
                "tool": w.tool,
                "sessions": w.sessions,
                "calls": w.calls,
                "pool": w.pool,
                "concurrency": w.concurrency,
                "workers": w.workers,
                "loop_sessions": w.loop_sessions,
            }
            for w in config.workloads()
        },
    }


def note_foreign_clients(stack: BenchStack, report: Report) -> None:
    """Remember the most clients seen busy on other databases of our Redis (last minute)."""
    dbs = (stack.config.broker_db, stack.config.ledger_db)
    seen = foreign_clients(stack.redis(), dbs, 60)
    report.info["foreign_redis_clients"] = max(seen, report.info.get("foreign_redis_clients", 0))


def measure(config: BenchConfig, report: Report) -> None:
    """Every phase, on one stack."""
    workdir = config.out / "logs"
    workdir.mkdir(parents=True, exist_ok=True)
    with BenchStack(config, workdir) as stack:
        use_stack_env(stack.env)
        emu = Emulator(stack.origin)
        try:
            for workload in config.workloads():
                run_workload(stack, emu, workload, report)
                note_foreign_clients(stack, report)
            say(f"polling {config.idle_sessions:,} idle sessions")
            report.idle = run_idle(stack, emu, config.idle_sessions)
            note_foreign_clients(stack, report)
        finally:
            emu.close()


def run_bench(config: BenchConfig) -> int:
    """Run the bench and write ``bench.json``, ``bench.txt`` and ``bench.png`` to ``out``.

    Returns 0 even when a target is missed: the bench measures, it does not judge a build.
    """
    config = config.quick_sized() if config.quick else config
    config.out.mkdir(parents=True, exist_ok=True)
    report = Report(info=describe(config))
    ticks = cpu_ticks()
    measure(config, report)
    report.info["load_average_at_end"] = os.getloadavg()
    stolen = stolen_share(ticks, cpu_ticks())
    report.info["cpu_stolen_share"] = stolen
    text = lines(report)
    if stolen is not None:
        text.append(f"machine: {stolen:.1%} of the CPU time was stolen by the hypervisor")
    if report.info.get("foreign_redis_clients"):
        text.append(
            f"note: {report.info['foreign_redis_clients']} other Redis clients were active on "
            "other databases; INFO commandstats counts the whole server, so the Redis figures "
            "include their commands (use --private-redis for clean ones)"
        )
    (config.out / "bench.txt").write_text("\n".join(text) + "\n")
    report.write(config.out / "bench.json")
    draw(report, config.out / "bench.png")
    print("\n".join(text), flush=True)
    say(f"wrote {config.out / 'bench.json'}, bench.txt and bench.png")
    return 0
