"""``python -m bench anatomy``: what one no-op call costs inside ``execute``, part by part.

The full bench says how far toolfan's worker pool is from the floor's (``bench/floor.py``)
in CPU per call; this says where the difference lies, in one process, with no broker and
no pool around the calls: the body of ``toolfan.execute`` for one no-op call against the
body of the floor's call (one ledger ``finish``), and each part of the former alone, as
the engine runs it:

* the ledger's ``begin`` and ``finish`` (one Lua script and round trip each), beside a
  Redis ``PING`` through the client, on a connection held out of its pool, and on a bare
  socket (what the client's own work per command is);
* the argument validation, the call's context, the tool's timeout (a timer on the task's
  own thread, as a prefork pool process times a call; the runner thread a threads pool
  hands it to is weighed beside it), the metrics and the log line per call (JSON,
  toolfan's default format, to ``/dev/null``: the write to a real log costs more);
* what is left: the envelope, the ids, the result and the glue between the parts.

A part measured alone runs hot, and costs more inside the whole: so each part is weighed
a second time *inside*, as what ``execute`` costs with it against without it (switched off
in this process: see :func:`switches`), the median difference of ``--inside-pairs`` pairs
of rounds of ``--inside-calls`` calls. Those figures do not add up to the body either:
taking one part out also spares the others some of its cache misses.

With ``--threads N`` each part is weighed a third time, with N threads calling ``execute``
at once as a threads pool of that concurrency runs it (:mod:`bench.anatomy_threads`):
there each wait of a call hands the interpreter lock to another thread, a cost one thread
never pays.

Each figure is CPU time per call (``time.process_time``, so the runner thread's share
counts), the median of ``--rounds`` rounds of ``--calls`` calls after a warm-up, on
its own Redis database (flushed at start and end). CPU per call, not wall time: on a
saturated machine throughput follows CPU (bench/README.md, "The targets not met, and why").
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench.anatomy_threads import Switch, ThreadsConfig, alternating, measure_threads
from bench.config import IO_TOOL, NOOP_TOOL, BenchConfig
from bench.stack import DatabasesInUse, owning, redis_server

#: The parts, in the order ``execute`` runs them, and what each is.
PARTS: tuple[tuple[str, str], ...] = (
    ("begin", "the ledger's begin: the attempt's record (one script)"),
    ("validate", "the tool's argument validation (pydantic)"),
    ("context", "the call's CallContext"),
    ("timeout", "the tool's timeout (a timer on the task's thread, as on prefork)"),
    ("finish", "the ledger's finish: the saved result (one script)"),
    ("metrics", "the call's counter and duration histogram"),
    ("log_line", "the call's INFO line (JSON)"),
)
#: The most threads ``--threads`` starts: a Celery threads pool of more is no pool anyone
#: runs, and each thread holds a Redis connection for the ledger's scripts.
MAX_THREADS = 1024
#: The whole bodies, and a Redis round trip three ways: through the client (as every script
#: goes), on a connection held out of its pool, and on a bare socket.
#: A runner thread's hand-off alone (a threads pool's way to time a call), and the body
#: with it in place of the timer against with the timer (what the timer saves on prefork).
RUNNER, RUNNER_INSTEAD = "runner", "runner_instead"
WHOLE = ("execute", "floor_call", "redis_ping", "redis_ping_held", "redis_ping_socket")


@dataclass(frozen=True)
class AnatomyConfig:
    """What one anatomy run measures on."""

    bench: BenchConfig = field(default_factory=BenchConfig)
    calls: int = 2000
    rounds: int = 5
    warm_up: int = 300
    #: Calls per round, and pairs of rounds, of the parts weighed inside the whole.
    inside_calls: int = 1000
    inside_pairs: int = 6
    #: Threads calling at once for the threads pool's figures (0: not weighed), and the
    #: tool they call (``io``: the I/O workload's 50 ms tool; ``noop``).
    threads: ThreadsConfig | None = None
    threads_tool: str = "io"


def per_call(fn: Callable[[], object], config: AnatomyConfig) -> dict[str, Any]:
    """Microseconds of CPU per call of ``fn``: the median round, and every round."""
    for _ in range(config.warm_up):
        fn()
    rounds = [_round(fn, config.calls) for _ in range(config.rounds)]
    return {"us": statistics.median(rounds), "rounds": rounds}


def _round(fn: Callable[[], object], calls: int) -> float:
    """Microseconds of CPU per call of ``fn`` over ``calls`` calls."""
    started = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - started) / calls * 1e6


def inside(fn: Callable[[], object], switch: Switch, config: AnatomyConfig) -> dict[str, Any]:
    """What a part costs inside the whole: ``fn`` with the part against ``fn`` without it.

    Rounds alternate, with and without, in pairs whose order flips each time, so a machine
    that speeds up or slows down weighs on both sides alike; the figure is the median of the
    pairs' differences. The part is always switched back on.
    """

    def round_() -> float:
        for _ in range(config.inside_calls // 10):  # settle after the switch
            fn()
        return _round(fn, config.inside_calls)

    kept, dropped = alternating(switch, round_, config.inside_pairs)
    differences = [k - d for k, d in zip(kept, dropped, strict=True)]
    return {"us": statistics.median(differences), "with": kept, "without": dropped}


@contextmanager
def ledger_database(config: BenchConfig) -> Iterator[str]:
    """The URL of the emptied ledger database, owned as the bench owns it, emptied after.

    Raises:
        DatabasesInUse: a bench is measuring on that database.
    """
    with redis_server(config) as base:
        url = f"{base}/{config.ledger_db}"
        client = redis.Redis.from_url(url)  # closed by owning, refused or not
        with owning(client, str(config.ledger_db), client.flushdb):
            try:
                yield url
            finally:
                client.flushdb()


def use_ledger(url: str) -> None:
    """Point this process's toolfan at ``url`` with the bench's tools, before it loads.

    Raises:
        RuntimeError: toolfan's engine is loaded already, with other settings.
    """
    if "tasks.settings" in sys.modules:
        raise RuntimeError("the anatomy must run in its own process (tasks is loaded)")
    for key in [k for k in os.environ if k.startswith("TOOLFAN_")]:
        del os.environ[key]
    os.environ.update(TOOLFAN_REDIS_URL=url, TOOLFAN_HANDLERS="bench.tools")


def json_logging() -> None:
    """A worker's logging, JSON lines at INFO, written to ``/dev/null``."""
    from tasks.logs import structured

    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(logging.StreamHandler(open(os.devnull, "w")))  # noqa: SIM115
    structured(root, 2000)


Figures = dict[str, dict[str, Any]]


def measure(config: AnatomyConfig) -> tuple[Figures, Figures, dict[str, Any] | None]:
    """Every whole body and every part alone; then every part inside the whole.

    CPU microseconds per call, the second set as :func:`inside` weighs it; the third, with
    ``config.threads``, each part inside the whole with that many threads calling at once
    (:mod:`bench.anatomy_threads`), or None.
    """
    from bench import tools
    from handlers.alarm import ALARM
    from handlers.result import CallResult
    from handlers.threads import RUNNERS
    from tasks import execute as ex
    from tasks import metrics
    from tasks.context import context_of
    from tasks.envelope import Envelope
    from tasks.ledger import CallRef
    from tasks.runtime import get_ledger
    from tasks.settings import load_registry

    json_logging()
    ALARM.enable(_never_stuck)  # as a prefork pool process does: calls on this thread
    ledger, registry = get_ledger("agents"), load_registry()
    tool = registry.get(NOOP_TOOL)
    assert tool is not None, f"{NOOP_TOOL} is not registered"
    batch, counter = f"anatomy_{uuid.uuid4().hex}", iter(range(10**9))
    envelope = Envelope("agents", batch, "call", NOOP_TOOL, "{}", "turn")
    result, line = CallResult.ok(tools.OUTPUT), logging.getLogger("toolfan.execute")
    fields = {"source": "agents", "session_id": batch, "call_id": "call", "function": NOOP_TOOL}

    def call() -> None:
        wire = Envelope("agents", batch, f"e{next(counter)}", NOOP_TOOL, "{}", "turn").to_wire()
        ex.execute.run(call=wire)

    def ref() -> CallRef:
        return CallRef(batch, "turn", f"p{next(counter)}")

    def measured() -> None:
        metrics.CALLS.labels(NOOP_TOOL, "success").inc()
        metrics.CALL_DURATION.labels(NOOP_TOOL).observe(0.0001)

    bodies: dict[str, Callable[[], object]] = {
        "execute": call,
        "floor_call": lambda: tools.floor_call.run(batch, "floor", f"f{next(counter)}"),
        "redis_ping": ledger.client.ping,
        "begin": lambda: ledger.begin(ref(), NOOP_TOOL, "anatomy"),
        "validate": lambda: tool.parse("{}"),
        "context": lambda: context_of(envelope, 1),
        "timeout": lambda: ALARM.run(tools.bench_noop, tool.timeout, None),
        RUNNER: lambda: RUNNERS.run(tools.bench_noop, tool.timeout),
        "finish": lambda: ledger.finish(ref(), result),
        "metrics": measured,
        "log_line": lambda: line.info("%s call %s", batch, "success", extra=fields),
    }
    with round_trips(ledger.client) as pings:
        bodies.update(pings)
        figures = {name: per_call(fn, config) for name, fn in bodies.items()}
    off = switches(ledger, tool, envelope)
    within = {name: inside(call, off[name], config) for name, _ in PARTS}
    within[RUNNER_INSTEAD] = inside(call, runner_instead(), config)
    if config.threads is None:
        return figures, within, None
    return figures, within, in_threads(ledger, registry, batch, config)


def runner_instead() -> Switch:
    """On: calls go to a runner thread, as before the timer; off: the timer, as on prefork.

    Weighed inside the whole, it is what the timer saves a prefork pool process per call.
    """
    from handlers import runner
    from handlers.alarm import ALARM, Alarm

    timer, never_enabled = ALARM, Alarm()
    return lambda on: setattr(runner, "ALARM", never_enabled if on else timer)


def _never_stuck(context: Any, timeout: float) -> None:
    """The watchdog's call for a call that would not stop: a no-op call never is."""
    raise RuntimeError(f"a no-op call overran its timeout of {timeout:g} s")


def in_threads(ledger: Any, registry: Any, batch: str, config: AnatomyConfig) -> dict[str, Any]:
    """Each part weighed inside the whole with ``config.threads`` threads calling at once.

    The calls name the tool with no arguments: the I/O tool's default is the I/O workload's
    50 ms, and the no-op tool takes none.
    """
    from tasks import execute as ex
    from tasks.envelope import Envelope

    assert config.threads is not None
    name = IO_TOOL if config.threads_tool == "io" else NOOP_TOOL
    tool = registry.get(name)
    assert tool is not None, f"{name} is not registered"
    counter = iter(range(10**9))

    def call() -> None:
        wire = Envelope("agents", batch, f"t{next(counter)}", name, "{}", "turn").to_wire()
        ex.execute.run(call=wire)

    off = switches(ledger, tool, Envelope("agents", batch, "call", name, "{}", "turn"))
    figures = measure_threads(call, off, [part for part, _ in PARTS], config.threads)
    return {"tool": name, **figures}


class _Unmeasured:
    """Metrics that count nothing: ``execute``'s metrics switched off."""

    def labels(self, *values: str) -> _Unmeasured:
        return self

    def inc(self) -> None:
        """Counts nothing."""

    def observe(self, value: float) -> None:
        """Records nothing."""


class _NoMetrics:
    """Stands in for ``tasks.metrics`` in ``execute`` while its metrics are off."""

    CALLS = CALL_DURATION = _Unmeasured()

    @staticmethod
    def function_label(name: str, known: bool) -> str:
        return name


def switches(ledger: Any, tool: Any, envelope: Any) -> dict[str, Switch]:
    """Each part of ``execute`` that can be switched off in this process, by name.

    Off, a part is replaced by what it would have given a no-op call: a first attempt, the
    parsed empty arguments, the call's context, the tool called on this thread, the result
    not saved, metrics that count nothing, and no log line (its logger at WARNING).
    """
    from handlers import runner
    from handlers.context import within
    from tasks import execute as ex
    from tasks.context import context_of
    from tasks.ledger import Begin

    parsed = runner.parse_arguments(tool, "{}", {})
    ctx = context_of(envelope, 1)
    line = logging.getLogger("toolfan.execute")
    level = line.level

    def swap(owner: object, name: str, stand_in: object) -> Switch:
        real = getattr(owner, name)
        return lambda on: setattr(owner, name, real if on else stand_in)

    return {
        "begin": swap(ledger, "begin", lambda ref, name, worker="": Begin(None, 1)),
        "validate": swap(ex, "parse_arguments", lambda *args: parsed),
        "context": swap(ex, "context_of", lambda envelope, attempt: ctx),
        "timeout": swap(runner, "_with_timeout", lambda call, t, a, c=None: within(c, call)),
        "finish": swap(ledger, "finish", lambda ref, result: result),
        "metrics": swap(ex, "metrics", _NoMetrics()),
        "log_line": lambda on: line.setLevel(level if on else logging.WARNING),
    }


@contextmanager
def round_trips(client: redis.Redis) -> Iterator[dict[str, Callable[[], object]]]:
    """A ``PING`` on a connection held out of ``client``'s pool, and on a bare socket.

    What the client's own work per command is: its pool's checkout and return, and its
    command wrapper, against the wire's round trip.
    """
    pool = client.connection_pool
    held = pool.get_connection()
    kwargs = pool.connection_kwargs
    bare = socket.create_connection((kwargs.get("host", "localhost"), kwargs.get("port", 6379)))

    def on_held() -> None:
        held.send_command("PING")  # type: ignore[no-untyped-call]
        held.read_response()

    def on_socket() -> None:
        bare.sendall(b"*1\r\n$4\r\nPING\r\n")
        if bare.recv(64) != b"+PONG\r\n":
            raise RuntimeError("the bare socket's PING got another answer")

    try:
        yield {"redis_ping_held": on_held, "redis_ping_socket": on_socket}
    finally:
        bare.close()
        pool.release(held)


def document(
    config: AnatomyConfig,
    figures: Figures,
    within: Figures,
    threads: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON: every figure, the parts' sums alone and inside, and what they leave.

    ``threads``, when weighed, goes in as it is, with its parts' sum and what they leave.
    """
    body = figures["execute"]["us"]
    parts = sum(figures[name]["us"] for name, _ in PARTS)
    inside_sum = sum(within[name]["us"] for name, _ in PARTS)
    return {
        "calls_per_round": config.calls,
        "rounds": config.rounds,
        "figures": figures,
        "parts_us": parts,
        "rest_us": body - parts,
        "execute_vs_floor_call": body / figures["floor_call"]["us"],
        "inside_calls_per_round": config.inside_calls,
        "inside_pairs": config.inside_pairs,
        "inside": within,
        "inside_parts_us": inside_sum,
        "inside_rest_us": body - inside_sum,
        **({"threads": _with_sums(threads)} if threads is not None else {}),
    }


def _with_sums(threads: dict[str, Any]) -> dict[str, Any]:
    total = sum(figure["us"] for figure in threads["parts"].values())
    return {**threads, "parts_us": total, "rest_us": threads["body_us"] - total}


def lines(doc: dict[str, Any]) -> list[str]:
    """The printed table: each part's microseconds, alone and inside, and share of the body."""
    figures, body = doc["figures"], doc["figures"]["execute"]["us"]
    inside_ = doc["inside"]
    out = [
        f"one no-op call, CPU per call (alone: median of {doc['rounds']} x "
        f"{doc['calls_per_round']}; inside: the body with against without the part, median "
        f"of {doc['inside_pairs']} pairs of {doc['inside_calls_per_round']}):",
        f"  execute body      {body:7.1f} us  (the floor's call {figures['floor_call']['us']:.1f}"
        f" us: {doc['execute_vs_floor_call']:.2f}x)",
        f"  a Redis PING      {figures['redis_ping']['us']:7.1f} us  through the client "
        f"({figures['redis_ping_held']['us']:.1f} us on a held connection, "
        f"{figures['redis_ping_socket']['us']:.1f} us on a bare socket)",
        f"  {'part':16s}  {'alone':>7s}     {'inside':>7s}     share  what",
    ]
    for name, what in PARTS:
        us, within = figures[name]["us"], inside_[name]["us"]
        out.append(f"  {name:16s}  {us:7.1f} us  {within:7.1f} us  {within / body:5.1%}  {what}")
    if RUNNER_INSTEAD in inside_:
        alone, within = figures[RUNNER]["us"], inside_[RUNNER_INSTEAD]["us"]
        out.append(
            f"  {'(runner thread)':16s}  {alone:7.1f} us  {within:7.1f} us  {within / body:5.1%}"
            "  a runner thread's hand-off in place of the timer (a threads pool's way; inside:"
            " the body with it against with the timer)"
        )
    rest, rest_inside = doc["rest_us"], doc["inside_rest_us"]
    out.append(
        f"  {'the rest':16s}  {rest:7.1f} us  {rest_inside:7.1f} us  {rest_inside / body:5.1%}"
        "  envelope, ids, glue (alone: and the parts' extra cost inside the whole)"
    )
    if "threads" in doc:
        out += threads_lines(doc["threads"])
    return out


def threads_lines(threads: dict[str, Any]) -> list[str]:
    """The threads pool's table: each part inside the whole with the threads calling."""
    body = threads["body_us"]
    out = [
        f"with {threads['threads']} threads calling {threads['tool']} at once (CPU of the "
        f"process per call; inside: median of {threads['pairs']} pairs of "
        f"{threads['seconds']:g} s windows):",
        f"  execute body      {body:7.1f} us  ({threads['calls_per_s']:,.0f} calls/s)",
        f"  {'part':16s}  {'inside':>7s}     share  calls/s without it",
    ]
    for name, figure in threads["parts"].items():
        us, rate = figure["us"], figure["calls_per_s_without_vs_with"]
        out.append(f"  {name:16s}  {us:7.1f} us  {us / body:5.1%}  x{rate:.3f}")
    rest = threads["rest_us"]
    out.append(f"  {'the rest':16s}  {rest:7.1f} us  {rest / body:5.1%}")
    return out


def build_parser() -> argparse.ArgumentParser:
    """The anatomy's options."""
    defaults, bench = AnatomyConfig(), BenchConfig()
    p = argparse.ArgumentParser(
        prog="python -m bench anatomy",
        description="CPU per call of toolfan's execute body for one no-op call, part by part, "
        "against the floor's call, in this process on one Redis database (flushed at start "
        "and end). Writes anatomy.json and anatomy.txt to --out.",
    )
    p.add_argument("--calls", type=int, default=defaults.calls, help="calls per round (2,000)")
    p.add_argument("--rounds", type=int, default=defaults.rounds, help="rounds (5; the median)")
    p.add_argument(
        "--inside-calls",
        type=int,
        default=defaults.inside_calls,
        help="calls per round of a part weighed inside the whole (1,000)",
    )
    p.add_argument(
        "--inside-pairs",
        type=int,
        default=defaults.inside_pairs,
        help="pairs of rounds (and of --threads windows), with and without the part "
        "(6; the median difference)",
    )
    threads = ThreadsConfig()
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="also weigh each part with this many threads calling at once, as a threads pool "
        f"of that concurrency runs them (0: not weighed; the I/O workload's is "
        f"{bench.io_concurrency}; at most {MAX_THREADS}); a few minutes",
    )
    p.add_argument(
        "--threads-tool",
        choices=("io", "noop"),
        default="io",
        help="what the threads call: the I/O workload's 50 ms tool, or the no-op (io)",
    )
    p.add_argument(
        "--threads-seconds",
        type=float,
        default=threads.seconds,
        help=f"seconds of one window with the threads calling ({threads.seconds:g})",
    )
    p.add_argument("--out", default=str(bench.out), help=f"output directory ({bench.out})")
    p.add_argument("--redis-url", default=None, help="Redis server (default: TOOLFAN_REDIS_URL's)")
    p.add_argument("--private-redis", action="store_true", help="start a private redis-server")
    p.add_argument("--ledger-db", type=int, default=bench.ledger_db, help="database (5)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, measure, and write ``anatomy.json`` and ``anatomy.txt``."""
    args = build_parser().parse_args(argv)
    if min(args.calls, args.rounds, args.inside_calls, args.inside_pairs) < 1:
        print(
            "python -m bench anatomy: --calls, --rounds, --inside-calls and --inside-pairs "
            "must be positive",
            file=sys.stderr,
        )
        return 2
    if not 0 <= args.threads <= MAX_THREADS or not 0 < args.threads_seconds < math.inf:
        print(
            f"python -m bench anatomy: --threads must be 0 to {MAX_THREADS} and "
            "--threads-seconds positive",
            file=sys.stderr,
        )
        return 2
    bench = BenchConfig(
        out=Path(args.out),
        redis_url=args.redis_url,
        private_redis=args.private_redis,
        ledger_db=args.ledger_db,
    )
    config = AnatomyConfig(
        bench=bench,
        calls=args.calls,
        rounds=args.rounds,
        inside_calls=args.inside_calls,
        inside_pairs=args.inside_pairs,
        threads=ThreadsConfig(args.threads, args.threads_seconds, args.inside_pairs)
        if args.threads
        else None,
        threads_tool=args.threads_tool,
    )
    try:
        with ledger_database(bench) as url:
            use_ledger(url)
            doc = document(config, *measure(config))
    except DatabasesInUse as exc:
        print(f"python -m bench anatomy: {exc}", file=sys.stderr)
        return 2
    bench.out.mkdir(parents=True, exist_ok=True)
    (bench.out / "anatomy.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = lines(doc)
    (bench.out / "anatomy.txt").write_text("\n".join(text) + "\n")
    print("\n".join(text), flush=True)
    return 0
