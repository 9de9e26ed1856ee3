"""``python -m bench curves``: how throughput, p95 and Redis memory move with the load's shape.

Three curves of the no-op workload, each point one variant measured through toolfan and
through raw Celery chords on the same workers, back to back (raw Celery first, before the
poller starts, as the main bench does), so every point carries its own baseline:

- **calls per batch** (1, 4, 16, 64 calls in each session, the default worker): the
  batch's fixed costs (list, retrieve, claim, chord, submit) spread over more calls;
- **batches in flight** (1 to 256 sessions seeded at once): how much of the fleet one
  wave keeps busy; small waves are repeated, so each point still runs enough calls;
- **worker processes** (one ``toolfan worker -c N``, prefork): where the cores saturate.

The calls-per-batch points also weigh **Redis memory per saved call**: the server's
``used_memory`` after a run minus before, per call, and what the keys the run left behind
hold (toolfan's ledger keeps each result until its TTL; raw Celery's result backend keeps
each task's result until ``result_expires``).

A point's figures are those of its median run (``--reps`` runs, or more waves for small
in-flight counts); every run's calls/s is kept in ``curves.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby
from pathlib import Path
from typing import Any

import redis

from bench.config import NOOP_TOOL, BenchConfig, Workload
from bench.emu import Emulator
from bench.engine import run_raw, run_toolfan
from bench.figures import RAW, SYSTEMS, TOOLFAN, Measurement, ratio
from bench.measure import foreign_clients, machine
from bench.run import WARM_UP, median, say, use_stack_env
from bench.stack import BenchStack
from dispatcher.devstack import Service

CALLS_PER_BATCH = "calls_per_batch"
IN_FLIGHT = "in_flight"
PROCESSES = "worker_processes"
#: Seconds to wait after a run before reading memory: the last results and acks land.
SETTLE = 0.3
#: The bench's own keys (the raw chords' completion lists, the owner key): not what
#: toolfan or Celery keeps, so never counted as either's memory.
BOOKKEEPING = "bench:"
#: Columns of ``answered``: toolfan's accounting, and raw Celery's.
ANSWERED = ("batches", "sessions_answered", "events", "failed_events", "results")


def process_counts() -> tuple[int, ...]:
    """1, 2, one per CPU and two per CPU (without repeats): what the machine allows."""
    cpus = os.cpu_count() or 1
    return tuple(sorted({1, 2, cpus, 2 * cpus}))


@dataclass(frozen=True)
class CurvesConfig:
    """The curves' sizes; ``bench`` holds the stack's options (Redis, interval, output).

    ``calls_per_point`` is what each run of a point aims at; an in-flight wave smaller than
    that is repeated up to ``max_runs`` times, so a point of one session is not one sample.
    """

    bench: BenchConfig = field(default_factory=BenchConfig)
    calls_per_point: int = 1_000
    batch_sizes: tuple[int, ...] = (1, 4, 16, 64)
    in_flight: tuple[int, ...] = (1, 4, 16, 64, 256)
    processes: tuple[int, ...] = field(default_factory=process_counts)
    calls: int = 4
    reps: int = 3
    max_runs: int = 12

    def quick_sized(self) -> CurvesConfig:
        """The smoke-test size: two points a curve, about 20 calls a run, one run a point."""
        return replace(
            self,
            bench=replace(self.bench, timeout=60.0, quick=True),
            calls_per_point=20,
            batch_sizes=self.batch_sizes[:2],
            in_flight=self.in_flight[:2],
            processes=self.processes[:2],
            reps=1,
            max_runs=3,
        )


@dataclass(frozen=True)
class Point:
    """One variant of the no-op workload, at ``x`` on its curve, run ``runs`` times."""

    x: int
    workload: Workload
    runs: int


@dataclass(frozen=True)
class Curve:
    """A curve's points, and whether they weigh Redis memory too."""

    name: str
    title: str
    axis: str
    points: tuple[Point, ...]
    memory: bool = False


def plan(config: CurvesConfig) -> list[Curve]:
    """The three curves, each point a ``replace`` of the main bench's no-op workload."""
    noop = next(w for w in config.bench.workloads() if w.tool == NOOP_TOOL)
    target = config.calls_per_point

    def variant(name: str, sessions: int, calls: int) -> Workload:
        return replace(noop, name=name, sessions=sessions, calls=calls, loop_sessions=sessions)

    batch = tuple(
        Point(k, variant(f"batch{k}", math.ceil(target / k), k), config.reps)
        for k in config.batch_sizes
    )
    flight = tuple(
        Point(n, variant(f"flight{n}", n, config.calls), _waves(config, n * config.calls))
        for n in config.in_flight
    )
    sessions = math.ceil(target / config.calls)
    procs = tuple(
        Point(p, replace(variant(f"proc{p}", sessions, config.calls), concurrency=p), config.reps)
        for p in config.processes
    )
    return [
        Curve(
            CALLS_PER_BATCH,
            f"calls per batch: ~{target:,} no-op calls a run, default worker",
            "calls per batch",
            batch,
            memory=True,
        ),
        Curve(
            IN_FLIGHT,
            f"batches in flight: sessions of {config.calls} calls seeded at once, in waves "
            f"up to ~{target:,} calls, default worker",
            "batches in flight",
            flight,
        ),
        Curve(
            PROCESSES,
            f"worker processes: {sessions:,} sessions x {config.calls} calls, one worker -c N",
            "worker processes",
            procs,
        ),
    ]


def _waves(config: CurvesConfig, calls: int) -> int:
    """Runs of one in-flight point: enough waves for ~``calls_per_point``, within bounds."""
    wanted = math.ceil(config.calls_per_point / calls)
    return min(max(wanted, config.reps), max(config.max_runs, config.reps))


@dataclass(frozen=True)
class Snapshot:
    """The server's ``used_memory`` and every key of the bench's two databases."""

    used_memory: int
    keys: frozenset[tuple[int, bytes]]


def clients(stack: BenchStack) -> dict[int, redis.Redis]:
    """A client of each of the bench's databases (broker, then results and ledger)."""
    dbs = (stack.config.broker_db, stack.config.ledger_db)
    return {db: redis.Redis.from_url(f"{stack.base}/{db}") for db in dbs}


def snapshot(by_db: dict[int, redis.Redis]) -> Snapshot:
    """Memory and keys, once what the last run sent has landed (:data:`SETTLE`)."""
    time.sleep(SETTLE)
    keys = frozenset(
        (db, key) for db, client in by_db.items() for key in client.scan_iter(count=1000)
    )
    first = next(iter(by_db.values()))
    return Snapshot(int(first.info("memory")["used_memory"]), keys)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NUMBER = re.compile(r"\d+")
_LONG_NUMBER = re.compile(r"\d{6,}")


def key_pattern(key: str) -> str:
    """The key's shape: ids (uuids, a batch's ``{tag}``, the numbers after it) become ``*``.

    ``toolfan:v2:agents:call:{sess_1}:t1:c3`` -> ``toolfan:v2:agents:call:{*}:tN:cN``.
    """
    key = _UUID.sub("*", key)
    head, brace, tail = key.partition("{")
    if brace:
        rest = tail.partition("}")[2]
        key = f"{head}{{*}}{_NUMBER.sub('N', rest)}"
    return _LONG_NUMBER.sub("N", key)


def held(by_db: dict[int, redis.Redis], before: Snapshot, calls: int) -> dict[str, Any]:
    """What the runs since ``before`` left in Redis, per call: bytes, and the keys by shape.

    ``bytes_per_call`` is the ``used_memory`` delta (the bench's own completion lists taken
    out); ``key_bytes_per_call`` sums ``MEMORY USAGE`` of the new keys, allocator and
    client buffers aside. Each shape lists its type and one key's TTL (None: no TTL).
    """
    after = snapshot(by_db)
    shapes: dict[tuple[int, str], list[bytes]] = {}
    for db, key in sorted(after.keys - before.keys):
        shapes.setdefault((db, key_pattern(key.decode(errors="replace"))), []).append(key)
    rows, bookkeeping = [], 0
    for (db, pattern), keys in sorted(shapes.items()):
        size = _usage(by_db[db], keys)
        if pattern.startswith(BOOKKEEPING):
            bookkeeping += size
            continue
        rows.append(_shape_row(by_db[db], db, pattern, keys, size, calls))
    delta = after.used_memory - before.used_memory - bookkeeping
    return {
        "calls": calls,
        "used_memory_delta": delta,
        "bytes_per_call": delta / calls,
        "key_bytes_per_call": sum(r["bytes"] for r in rows) / calls,
        "keys_per_call": sum(r["keys"] for r in rows) / calls,
        "bookkeeping_bytes": bookkeeping,
        "held": rows,
    }


def _usage(client: redis.Redis, keys: Sequence[bytes]) -> int:
    """``MEMORY USAGE`` summed over the keys (one pipeline; a key gone since counts 0)."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key)
    return sum(int(size or 0) for size in pipe.execute())


def _shape_row(
    client: redis.Redis, db: int, pattern: str, keys: Sequence[bytes], size: int, calls: int
) -> dict[str, Any]:
    ttl = int(client.ttl(keys[0]))
    kind = client.type(keys[0])
    return {
        "db": db,
        "pattern": pattern,
        "type": kind.decode() if isinstance(kind, bytes) else str(kind),
        "ttl_s": ttl if ttl >= 0 else None,
        "keys": len(keys),
        "keys_per_call": len(keys) / calls,
        "bytes": size,
        "bytes_per_call": size / calls,
    }


@dataclass
class Measured:
    """One point's runs through both systems, and (on the memory curve) what they left."""

    point: Point
    toolfan: list[Measurement]
    raw: list[Measurement]
    memory: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The point as data: both systems' median runs, the ratios, the accounting."""
        tf, raw = summary(self.toolfan), summary(self.raw)
        w = self.point.workload
        out: dict[str, Any] = {
            "x": self.point.x,
            "sessions": w.sessions,
            "calls": w.calls,
            "concurrency": w.concurrency,
            "runs": self.point.runs,
            TOOLFAN: tf,
            RAW: raw,
            "throughput_vs_raw_celery": ratio(tf["calls_per_s"], raw["calls_per_s"]),
            "p95_vs_raw_celery": ratio(tf["latency"]["p95"], raw["latency"]["p95"]),
        }
        if self.memory:
            out["memory"] = {
                **self.memory,
                "bytes_vs_raw_celery": ratio(
                    self.memory[TOOLFAN]["bytes_per_call"], self.memory[RAW]["bytes_per_call"]
                ),
            }
        return out


def summary(runs: list[Measurement]) -> dict[str, Any]:
    """The median run's rate, latency and Redis count; every run's rate; pooled CPU.

    CPU per call is the runs' CPU over their calls, not the median run's: the kernel
    charges CPU by the tick, in steps of 10 ms per process as ``/proc`` shows it, so a run
    of a few calls (one batch in flight: four calls, 20 ms of CPU across seven processes)
    can read zero, or twice its due, on its own.
    """
    mid = median(runs)
    cpu = pooled_cpu(runs)
    return {
        "calls_per_s": mid.calls_per_s,
        "latency": mid.latency,
        "cpu_ms_per_call": None if cpu is None else cpu * 1000,
        "redis_commands_per_call": mid.redis_commands_per_call,
        "calls_per_s_per_run": [m.calls_per_s for m in runs],
        "sessions": sum(m.sessions for m in runs),
        "calls": sum(m.calls for m in runs),
        "answered": {k: sum(m.extra[k] for m in runs) for k in ANSWERED if k in runs[0].extra},
    }


def pooled_cpu(runs: Sequence[Measurement]) -> float | None:
    """CPU seconds per call over all of ``runs``; None when a run has no CPU figure."""
    calls = sum(m.calls for m in runs)
    if not calls or any(m.cpu_seconds_per_call is None for m in runs):
        return None
    return sum((m.cpu_seconds_per_call or 0.0) * m.calls for m in runs) / calls


def measure_point(
    stack: BenchStack, emu: Emulator, curve: Curve, point: Point, workers: list[Service]
) -> Measured:
    """Raw Celery's runs, then (poller on, warmed up) toolfan's, on the same workers."""
    w, by_db = point.workload, clients(stack)
    try:
        before = snapshot(by_db) if curve.memory else None
        raw = [run_raw(stack, w, workers) for _ in range(point.runs)]
        measured = Measured(point, [], raw)
        if before is not None:
            measured.memory[RAW] = held(by_db, before, sum(m.calls for m in raw))
        with stack.poller() as poller:
            run_toolfan(stack, emu, w, (workers, poller), WARM_UP)
            before = snapshot(by_db) if curve.memory else None
            measured.toolfan = [
                run_toolfan(stack, emu, w, (workers, poller)) for _ in range(point.runs)
            ]
            if before is not None:
                calls = sum(m.calls for m in measured.toolfan)
                measured.memory[TOOLFAN] = held(by_db, before, calls)
    finally:
        for client in by_db.values():
            client.close()
    _progress(curve, measured)
    return measured


def _progress(curve: Curve, measured: Measured) -> None:
    tf, raw = median(measured.toolfan), median(measured.raw)
    say(
        f"  {curve.axis} {measured.point.x}: toolfan {tf.calls_per_s:,.0f} calls/s "
        f"p95 {tf.latency['p95']:.2f} s, raw Celery {raw.calls_per_s:,.0f} calls/s "
        f"p95 {raw.latency['p95']:.2f} s ({measured.point.runs} run(s) each)"
    )


def measure_curves(
    stack: BenchStack, emu: Emulator, curves: list[Curve]
) -> dict[str, list[Measured]]:
    """Every point, one worker fleet per worker shape (points that share one, share it)."""
    results: dict[str, list[Measured]] = {c.name: [] for c in curves}
    steps = [(c, p) for c in curves for p in c.points]
    for concurrency, group in groupby(steps, key=lambda step: step[1].workload.concurrency):
        items = list(group)
        first = items[0][1].workload
        shown = "default" if concurrency is None else f"-c {concurrency}"
        say(f"worker ({shown}) for {len(items)} point(s)")
        with stack.workers(first) as workers:
            run_raw(stack, first, workers, WARM_UP)
            for curve, point in items:
                results[curve.name].append(measure_point(stack, emu, curve, point, workers))
    return results


def fits(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The cost of one batch of K calls as ``a + b K``: its fixed part and its per-call part.

    Fitted on wall time per session (K over calls/s) and CPU per session, each point
    weighted by its relative error (``1 / y**2``): unweighted, the 64-call point's
    absolute size would swamp the intercept, the very figure the 1-call point pins down.
    A large ``a`` says the batch's fixed costs dominate, a large ``b`` the calls' own.
    """
    if len(points) < 2:
        return {}
    ks = [float(p["calls"]) for p in points]
    out: dict[str, Any] = {}
    for system in (TOOLFAN, RAW):
        wall = [1000 * k / p[system]["calls_per_s"] for k, p in zip(ks, points, strict=True)]
        cpu = [k * (p[system]["cpu_ms_per_call"] or 0.0) for k, p in zip(ks, points, strict=True)]
        out[system] = {"wall_ms": _line(ks, wall), "cpu_ms": _line(ks, cpu)}
    return out


def _line(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Weighted least squares of ``y = a + b x``, weights ``1 / y**2``."""
    ws = [1 / y**2 if y > 0 else 0.0 for y in ys]
    w, sx, sy = sum(ws), _dot(ws, xs), _dot(ws, ys)
    sxx, sxy = _dot(ws, [x * x for x in xs]), _dot(ws, [x * y for x, y in zip(xs, ys, strict=True)])
    denominator = w * sxx - sx * sx
    if w == 0 or denominator == 0:
        return {"per_batch": math.nan, "per_call": math.nan}
    slope = (w * sxy - sx * sy) / denominator
    return {"per_batch": (sy - slope * sx) / w, "per_call": slope}


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def describe(config: CurvesConfig) -> dict[str, Any]:
    """What the curves were measured on and with."""
    bench = config.bench
    return {
        **machine(),
        "poll_interval": bench.poll_interval,
        "calls_per_point": config.calls_per_point,
        "reps": config.reps,
        "max_runs": config.max_runs,
        "quick": bench.quick,
        "private_redis": bench.private_redis,
        "databases": {"broker": bench.broker_db, "ledger": bench.ledger_db},
    }


def document(
    info: dict[str, Any], curves: list[Curve], results: dict[str, list[Measured]]
) -> dict[str, Any]:
    """``curves.json``: the run's description (taken at its start) and every curve's points."""
    out: dict[str, Any] = {"info": info, "curves": {}}
    for c in curves:
        points = [m.to_json() for m in results[c.name]]
        out["curves"][c.name] = {"title": c.title, "axis": c.axis, "points": points}
        if c.name == CALLS_PER_BATCH:
            out["curves"][c.name]["fit"] = fits(points)
    return out


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.{digits}f}"


def curve_lines(curve: dict[str, Any]) -> list[str]:
    """One curve's table: throughput, p95 and CPU per call of both, and toolfan's ratios."""
    head = (
        f"{curve['axis']:>18} {'sessions':>8} {'runs':>4} | {'toolfan/s':>9} {'raw/s':>9} "
        f"{'ratio':>5} | {'tf p95':>6} {'raw p95':>7} {'ratio':>5} | {'tf ms/call':>10} "
        f"{'raw ms/call':>11}"
    )
    out = [curve["title"], head, "-" * len(head)]
    for p in curve["points"]:
        tf, raw = p[TOOLFAN], p[RAW]
        out.append(
            f"{p['x']:>18} {p['sessions']:>8,} {p['runs']:>4} | {_num(tf['calls_per_s'], 0):>9} "
            f"{_num(raw['calls_per_s'], 0):>9} {_num(p['throughput_vs_raw_celery']):>5} | "
            f"{_num(tf['latency']['p95']):>6} {_num(raw['latency']['p95']):>7} "
            f"{_num(p['p95_vs_raw_celery']):>5} | {_num(tf['cpu_ms_per_call']):>10} "
            f"{_num(raw['cpu_ms_per_call']):>11}"
        )
    for system, parts in curve.get("fit", {}).items():
        wall, cpu = parts["wall_ms"], parts["cpu_ms"]
        out.append(
            f"fit, {SYSTEMS[system]}: a batch of K calls takes {wall['per_batch']:.1f} + "
            f"{wall['per_call']:.2f} K ms of wall time, {cpu['per_batch']:.1f} + "
            f"{cpu['per_call']:.2f} K ms of CPU"
        )
    return out


def memory_lines(curve: dict[str, Any]) -> list[str]:
    """Bytes per saved call of both (``used_memory`` delta, and the keys' own), and what."""
    head = (
        f"{curve['axis']:>18} | {'tf B/call':>9} {'keys/call':>9} {'key B/call':>10} | "
        f"{'raw B/call':>10} {'keys/call':>9} {'key B/call':>10} | {'ratio':>5}"
    )
    out = [
        "Redis memory per saved call (used_memory after the runs minus before; keys: "
        "MEMORY USAGE of the keys they left)",
        head,
        "-" * len(head),
    ]
    points = [p for p in curve["points"] if "memory" in p]
    for p in points:
        tf, raw = p["memory"][TOOLFAN], p["memory"][RAW]
        out.append(
            f"{p['x']:>18} | {_num(tf['bytes_per_call'], 0):>9} {_num(tf['keys_per_call']):>9} "
            f"{_num(tf['key_bytes_per_call'], 0):>10} | {_num(raw['bytes_per_call'], 0):>10} "
            f"{_num(raw['keys_per_call']):>9} {_num(raw['key_bytes_per_call'], 0):>10} | "
            f"{_num(p['memory']['bytes_vs_raw_celery']):>5}"
        )
    if points:
        last = points[-1]
        out.append(f"what is held after the {curve['axis']} = {last['x']} runs:")
        for system in (TOOLFAN, RAW):
            for row in last["memory"][system]["held"]:
                ttl = "no TTL" if row["ttl_s"] is None else f"TTL {row['ttl_s']:,} s"
                out.append(
                    f"  {SYSTEMS[system]:>10}: db {row['db']} {row['pattern']} ({row['type']}, "
                    f"{ttl}): {row['keys_per_call']:.3g} keys and {row['bytes_per_call']:.0f} B "
                    "per call"
                )
    return out


def lines(doc: dict[str, Any]) -> list[str]:
    """``curves.txt``: a table per curve, the memory table, and the run's caveats."""
    info = doc["info"]
    out = [
        f"toolfan cost curves: {info['cpus']} CPUs, poll interval {info['poll_interval']:g} s, "
        f"{info['started']}; each point's figures are its median run (runs column); ratio "
        "columns are toolfan / raw Celery",
        "",
    ]
    for curve in doc["curves"].values():
        out += [*curve_lines(curve), ""]
        if any("memory" in p for p in curve["points"]):
            out += [*memory_lines(curve), ""]
    if info.get("foreign_redis_clients"):
        out.append(
            f"note: {info['foreign_redis_clients']} other Redis clients were active on other "
            "databases: INFO counts the whole server (use --private-redis for clean figures)"
        )
    return out


def run_curves(config: CurvesConfig) -> int:
    """Measure every curve on one stack; write ``curves.json``, ``curves.txt``, ``curves.png``."""
    from bench.curves_plot import draw

    out = config.bench.out
    workdir = out / "logs-curves"
    workdir.mkdir(parents=True, exist_ok=True)
    curves, info = plan(config), describe(config)
    with BenchStack(config.bench, workdir) as stack:
        use_stack_env(stack.env)
        emu = Emulator(stack.origin)
        try:
            results = measure_curves(stack, emu, curves)
            dbs = (config.bench.broker_db, config.bench.ledger_db)
            foreign = foreign_clients(stack.redis(), dbs, 600)
        finally:
            emu.close()
    doc = document(info, curves, results)
    doc["info"]["load_average_at_end"] = os.getloadavg()
    doc["info"]["foreign_redis_clients"] = foreign
    text = lines(doc)
    (out / "curves.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "curves.txt").write_text("\n".join(text) + "\n")
    draw(doc, out / "curves.png")
    print("\n".join(text), flush=True)
    say(f"wrote {out / 'curves.json'}, curves.txt and curves.png")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The curves' options (the stack's are the main bench's)."""
    defaults, bench = CurvesConfig(), BenchConfig()
    p = argparse.ArgumentParser(
        prog="python -m bench curves",
        description="Draws toolfan's cost curves against raw Celery chords on the same "
        "workers in the same run: throughput and p95 against calls per batch "
        f"({_list(defaults.batch_sizes)}), batches in flight ({_list(defaults.in_flight)} "
        "sessions seeded at once) and worker processes "
        f"({_list(defaults.processes)}, one worker -c N prefork), and Redis memory per saved "
        "call (used_memory delta, and the keys left, after the calls-per-batch runs). No-op "
        "tools; own emulator, workers and poller on two Redis databases (flushed at start "
        "and end). Writes curves.json, curves.txt and curves.png to --out.",
    )
    p.add_argument("--out", default=str(bench.out), help=f"output directory ({bench.out})")
    p.add_argument("--quick", action="store_true", help="two points a curve, ~20 calls a run")
    p.add_argument(
        "--private-redis",
        action="store_true",
        help="start a private redis-server: Redis figures free of other clients' memory",
    )
    p.add_argument(
        "--redis-url", default=None, help="Redis server to use (default: TOOLFAN_REDIS_URL's)"
    )
    p.add_argument(
        "--interval",
        type=float,
        default=bench.poll_interval,
        help=f"poll interval, seconds ({bench.poll_interval:g})",
    )
    p.add_argument(
        "--calls-per-point",
        type=int,
        default=defaults.calls_per_point,
        help=f"no-op calls a run aims at ({defaults.calls_per_point:,})",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=defaults.reps,
        help=f"runs of each point, the median reported ({defaults.reps}; small in-flight "
        f"waves run up to {defaults.max_runs} times)",
    )
    p.add_argument(
        "--broker-db",
        type=int,
        default=bench.broker_db,
        help=f"broker database ({bench.broker_db})",
    )
    p.add_argument(
        "--ledger-db",
        type=int,
        default=bench.ledger_db,
        help=f"results and ledger database ({bench.ledger_db})",
    )
    return p


def _list(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and draw the curves."""
    args = build_parser().parse_args(argv)
    if args.reps < 1 or args.calls_per_point < 1:
        print(
            "python -m bench curves: --reps and --calls-per-point must be positive", file=sys.stderr
        )
        return 2
    bench = BenchConfig(
        out=Path(args.out),
        poll_interval=args.interval,
        redis_url=args.redis_url,
        private_redis=args.private_redis,
        broker_db=args.broker_db,
        ledger_db=args.ledger_db,
    )
    config = CurvesConfig(bench=bench, calls_per_point=args.calls_per_point, reps=args.reps)
    return run_curves(config.quick_sized() if args.quick else config)
