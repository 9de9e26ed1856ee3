"""``python -m bench soak``: a long mixed load with faults on, watched for leaks and drift.

No-op, 50 ms and failing calls arrive as Poisson processes at a share of what this machine
sustained in bursts of sessions of the same mix measured first (the median of
``--bursts``), in the three ways the engine is driven: sessions (some with hostile ids),
watched runs of one or two phases (``--runs-share``) and ``run_tool_calls`` batches from
caller threads of this process (``--inline-share``). Every session that starts waiting is
also pushed to a ``toolfan webhook`` intake (``--no-push`` leaves it out), while the
pollers poll. Meanwhile the API errs, throttles and drops answers at low rates, the push
channel drops, repeats and shuffles events, a worker is SIGKILLed and restarted every few
minutes and a poller (of both sources) restarted. Every interval the soak samples the RSS
of each process tree, Redis's memory, keys (and those without TTL, by pattern), watched
runs, pub/sub channels and connections; it reports their growth from the first steady
sample to the last, the p95 of time to answer per window, and whether every session,
every run's phase and every batch was answered exactly once, and every push accepted.

Two things make a long run measure toolfan rather than its stand-ins. The ledger's TTL is
short (``--ledger-ttl``, 150 s), so the ledger reaches its steady size within the warm-up
instead of growing for the seven days of the default TTL; ``TOOLFAN_QUEUE_BUDGET`` goes
down to 60 s with it, so a session's claim lease (budget + tool timeout + grace, 100 s)
still ends before its records expire, as the defaults' does; and the intake remembers each
delivery's ``webhook-id`` for the same 150 s (``TOOLFAN_WEBHOOK_DEDUP_TTL``) instead of
72 h. And the emulator forgets its sessions every ``--epoch`` seconds (once every session of
the epoch is answered and the broker is quiet): it keeps every session it ever created,
and a poller lists them all each pass, so without that each pass would grow with the run.
Workers and pollers that die are not judged on memory (their RSS starts over); the prefork
and the threads worker and the fast pollers (one of sessions, one of runs) live the whole
run and are. An epoch closes only once every run of it is submitted and no longer watched:
the emulator forgetting a run the pollers still watch would drop its watch as a 404,
hiding a watch that leaks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from bench import soak_report
from bench.assistants import RUNS_PATH, runs_poller, submits
from bench.config import NOOP_TOOL, BenchConfig, Workload
from bench.emu import JSON, Emulator
from bench.measure import percentiles
from bench.soak_inline import BatchAnswer, InlineTally, batch_times
from bench.soak_load import Seeded, Tally, answer_times, plan_burst
from bench.soak_mix import INLINE, RUNS, Mix, Rates
from bench.soak_push import PUSH_FAULTS, QUICK_PUSH_FAULTS, Intake, PushTally
from bench.soak_queues import QueueWatch, peaks
from bench.soak_runs import RunTally, SeededRun, phase_times
from bench.soak_sample import LOAD_PATTERNS, connections, redis_sample, rss, watched_runs
from bench.stack import BenchStack
from dispatcher.devstack import Service, wait_for

#: The API's misbehaviour throughout the run: a few 500s, 429s and dropped 202s, and slow
#: answers to every accepted batch.
FAULTS: JSON = {
    "error_rate": 0.02,
    "throttle_rate": 0.01,
    "retry_after": 0.1,
    "lost_202_rate": 0.02,
    "answer_delay": 0.05,
}
#: The quick run's: higher, so that a few hundred requests see each kind.
QUICK_FAULTS: JSON = {**FAULTS, "error_rate": 0.08, "throttle_rate": 0.04, "lost_202_rate": 0.1}
#: Threads of the threads worker (it takes most of the 50 ms calls).
THREADS = 16
#: Interval of the poller that is restarted (the judged ones poll at the bench's 0.2 s).
SECOND_POLL_INTERVAL = 1.0
#: The sources of the poller that is restarted: it races both judged pollers.
SECOND_POLL_SOURCES = "agents,assistants"


@dataclass(frozen=True)
class SoakConfig:
    """One soak's options; :meth:`quick_sized` is the smoke test's."""

    out: Path = Path("bench-results/soak")
    minutes: float = 30.0
    rate: float | None = None
    share: float = 0.4
    runs_share: float = 0.15
    inline_share: float = 0.15
    inline_timeout: float = 60.0
    interval: float = 10.0
    warmup: float = 180.0
    window: float = 60.0
    epoch: float = 20.0
    kill_every: float = 180.0
    restart_every: float = 240.0
    ledger_ttl: int = 150
    queue_budget: int = 60
    burst: int = 300
    bursts: int = 3
    drain_timeout: float = 90.0
    final_timeout: float = 180.0
    seed: int = 1
    redis_url: str | None = None
    private_redis: bool = False
    quick: bool = False
    push: bool = True

    def quick_sized(self) -> SoakConfig:
        """About 45 s with one fault of each kind: every part runs, on tiny numbers."""
        return replace(
            self,
            minutes=0.5,
            interval=2.0,
            warmup=6.0,
            window=6.0,
            epoch=8.0,
            kill_every=60.0,
            restart_every=60.0,
            ledger_ttl=60,
            queue_budget=20,
            inline_timeout=30.0,
            burst=30,
            bursts=2,
            drain_timeout=40.0,
            final_timeout=60.0,
            quick=True,
        )

    @property
    def seconds(self) -> float:
        """Seconds of load."""
        return self.minutes * 60

    def schedule(self) -> list[tuple[float, str]]:
        """Worker kills and poller restarts, in load seconds; none in the last 15 s (5 s)."""
        first_kill, first_restart = (5.0, 10.0) if self.quick else (45.0, 100.0)
        until = self.seconds - (5 if self.quick else 15)
        events = _every(first_kill, self.kill_every, until, "kill_worker")
        events += _every(first_restart, self.restart_every, until, "restart_poller")
        return sorted(events)


def _every(first: float, every: float, until: float, kind: str) -> list[tuple[float, str]]:
    count = max(0, math.floor((until - first) / every) + 1) if until > first else 0
    return [(first + i * every, kind) for i in range(count)]


def _rates(rates: Sequence[float]) -> str:
    return ", ".join(f"{r:.0f}" for r in rates)


def say(text: str) -> None:
    """Progress on stderr."""
    print(f"soak: {text}", file=sys.stderr, flush=True)


def fleet(name: str, pool: str | None, concurrency: int | None) -> Workload:
    """A worker shape (the soak's workers serve every queue, as ``toolfan worker`` does)."""
    return Workload(name, NOOP_TOOL, {}, pool, concurrency, 0, 0, 0)


class Soak:
    """One soak run on a started stack: the fleet, the load, the samples and the tally."""

    def __init__(self, config: SoakConfig, stack: BenchStack, fleet_stack: ExitStack) -> None:
        self.config = config
        self.stack = stack
        self.fleet = fleet_stack
        self.emu = Emulator(stack.origin)
        self.redis = stack.redis()
        self.broker = redis.Redis.from_url(f"{stack.base}/{stack.config.broker_db}")
        self.pids: dict[str, int] = {"emulator": stack.emulator_pid}
        self.victim: tuple[ExitStack, list[Service]] | None = None
        self.victims = 0
        self.second_poller: Service | None = None
        self.tally = Tally()
        self.times: list[tuple[float, float]] = []
        self.series: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.faults: Counter[str] = Counter()
        self.epoch_seeded: list[Seeded] = []
        self.epoch_batches: list[JSON] = []
        self.epochs = 0
        self.postponed = 0
        self.started = 0.0
        self.burst_calls = 0
        self.mix: Mix | None = None
        self.turn = 0.0
        self.runs = RunTally()
        self.inline = InlineTally()
        self.epoch_runs: list[SeededRun] = []
        self.epoch_submits: list[JSON] = []
        self.epoch_answers: list[BatchAnswer] = []
        self.source_times: dict[str, list[tuple[float, float]]] = {RUNS: [], INLINE: []}
        self.watches_left: int | None = None
        self.intake: Intake | None = None
        self.pushes = PushTally()
        self.queues: QueueWatch | None = None
        self.redis_port = urlsplit(stack.base).port or 6379

    # --- the fleet ----------------------------------------------------------------------

    def start_fleet(self) -> None:
        """The judged workers and fast pollers (sessions, runs), a victim, a second poller."""
        prefork = self.fleet.enter_context(self.stack.workers(fleet("prefork", None, None)))
        threads = self.fleet.enter_context(self.stack.workers(fleet("threads", "threads", THREADS)))
        poller = self.fleet.enter_context(self.stack.poller())
        runs = self.fleet.enter_context(runs_poller(self.stack))
        self.pids.update(
            {"worker-prefork": prefork[0].proc.pid, "worker-threads": threads[0].proc.pid}
        )
        self.pids.update({"poller": poller.proc.pid, "poller-runs": runs.proc.pid})
        self.start_victim()
        self.start_second_poller()
        if self.config.push:
            self.intake = Intake(self.stack)
            self.pids["intake"] = self.intake.pid
        settings = self.emu.http.get("/settings").raise_for_status().json()
        self.turn = float(settings["turn_duration"])

    def start_victim(self) -> None:
        """A default worker that is SIGKILLed (main and pool processes) now and then."""
        self.victims += 1
        lifetime = ExitStack()
        services = lifetime.enter_context(
            self.stack.workers(fleet(f"victim{self.victims}", None, None))
        )
        self.victim = (lifetime, services)
        self.pids["victim"] = services[0].proc.pid

    def kill_victim(self) -> None:
        """SIGKILL the victim's process group, as an OOM kill or a lost node would; restart."""
        assert self.victim is not None
        lifetime, services = self.victim
        os.killpg(services[0].proc.pid, signal.SIGKILL)
        lifetime.close()
        self.faults["worker_kills"] += 1
        self.start_victim()

    def start_second_poller(self) -> None:
        """A second ``toolfan poll`` (1 s) of both sources, racing the first two: restarted."""
        index = self.faults["poller_restarts"]
        argv = ["poll", "--interval", str(SECOND_POLL_INTERVAL)]
        log = self.stack.workdir / f"poller-second{index}.log"
        env = {**self.stack.env, "TOOLFAN_SOURCES": SECOND_POLL_SOURCES}
        self.second_poller = Service(argv, log, env)
        self.second_poller.wait_for_output("poll:", 60)
        self.pids["poller-second"] = self.second_poller.proc.pid

    def restart_poller(self) -> None:
        """SIGTERM the second poller (a deploy), then start it again."""
        assert self.second_poller is not None
        self.second_poller.stop()
        self.faults["poller_restarts"] += 1
        self.start_second_poller()

    def stop_fleet(self) -> None:
        """Stop what the fleet's exit stack does not: the victim and the second poller."""
        if self.second_poller is not None:
            self.second_poller.stop()
        if self.victim is not None:
            self.victim[0].close()
        if self.intake is not None:
            self.intake.stop()

    # --- the emulator's epochs ------------------------------------------------------------

    def set_faults(self) -> None:
        """Turn the API's faults on (again: a reset turns them off)."""
        knobs = QUICK_FAULTS if self.config.quick else FAULTS
        body = {**knobs, "seed": self.config.seed + self.epochs}
        self.emu.http.put("/faults", json=body).raise_for_status()
        if self.intake is not None:  # after the calibration, as the API's faults
            pushed = QUICK_PUSH_FAULTS if self.config.quick else PUSH_FAULTS
            self.intake.register(self.emu, pushed, self.config.seed + self.epochs)

    def collect(self) -> None:
        """Read the batches and submits accepted since the last read."""
        self.epoch_batches += self.emu.batches(len(self.epoch_batches))
        self.epoch_submits += submits(self.emu, len(self.epoch_submits))

    def take(self) -> None:
        """Keep what every source sent since the last look (sessions, runs, answers)."""
        if self.mix is not None:
            self.epoch_seeded += self.mix.sessions.take()
            self.epoch_runs += self.mix.runs.take()
            self.epoch_answers += self.mix.inline.take()

    def settled(self) -> bool:
        """Whether the epoch may close: its sessions, runs and batches all answered.

        Also every dropped 202 replayed, no run watched any more, the broker idle.
        """
        self.take()
        self.collect()
        answered = {b["session_id"] for b in self.epoch_batches}
        if any(s.session_id not in answered for s in self.epoch_seeded):
            return False
        if not self.runs_submitted() or (self.mix is not None and self.mix.inline.in_flight()):
            return False
        records = self.emu.http.get("/requests", params={"path": "/events", "method": "POST"})
        data = records.raise_for_status().json()["data"]
        lost = {r["headers"].get("idempotency-key") for r in data if r["outcome"] == "lost"}
        replayed = {r["headers"].get("idempotency-key") for r in data if r["outcome"] == "replayed"}
        return lost <= replayed and self.broker_idle() and watched_runs(self.redis) == 0

    def runs_submitted(self) -> bool:
        """Every phase of every run of the epoch has an accepted submit."""
        done = {(s["thread_id"], s["run_id"], int(s["phase"])) for s in self.epoch_submits}
        return all(
            (*run.key, p) in done for run in self.epoch_runs for p in range(len(run.plan.phases))
        )

    def broker_idle(self) -> bool:
        """No message waiting in a queue or taken and not yet acknowledged."""
        for key in self.broker.scan_iter(count=1000):
            name = key.decode(errors="replace")
            if not LOAD_PATTERNS.match(name):
                continue
            kind = self.broker.type(key)
            waiting = self.broker.llen(key) if kind == b"list" else 0
            taken = self.broker.hlen(key) if kind == b"hash" else 0
            if waiting or taken:
                return False
        return True

    def close_epoch(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the epoch to settle, then close it (see :meth:`try_close`)."""
        try:
            wait_for(self.try_close, timeout, "the epoch's sessions to be answered", 0.25)
        except TimeoutError:
            return False
        return True

    def try_close(self) -> bool:
        """Tally the epoch and make the emulator forget it, if everything settled."""
        if not self.settled():
            return False
        self.watches_left = watched_runs(self.redis)
        self.tally_epoch()
        data = self.emu.http.get("/requests", params={"path": "/v1/"}).raise_for_status().json()
        self.faults.update(f"{_api(r['path'])}{r['outcome']}" for r in data["data"])
        if self.intake is not None:
            self.pushes.add(self.emu)
        self.emu.reset()
        self.set_faults()
        self.epochs += 1
        return True

    def tally_epoch(self) -> None:
        """Check the epoch's sessions, runs and batches, keep their times; start a new one."""
        self.tally.add(self.epoch_seeded, self.epoch_batches)
        self.times += answer_times(self.epoch_seeded, self.epoch_batches)
        self.runs.add(self.epoch_runs, self.epoch_submits)
        self.source_times[RUNS] += phase_times(self.epoch_runs, self.epoch_submits, self.turn)
        self.inline.add(self.epoch_answers)
        self.source_times[INLINE] += batch_times(self.epoch_answers)
        self.epoch_seeded, self.epoch_batches = [], []
        self.epoch_runs, self.epoch_submits, self.epoch_answers = [], [], []

    # --- the run ------------------------------------------------------------------------

    def calibrate(self) -> list[float]:
        """Calls per second this stack answers in each of ``bursts`` bursts of the mix, faults off.

        With faults on, a retry's back-off would make the burst's last answer, not the
        fleet, the measure. One burst's figure swings with whatever the machine does at
        that moment (a fifth and more between bursts a minute apart), so the load follows
        the median of several.
        """
        rates: list[float] = []
        for index in range(self.config.bursts):
            plans = plan_burst(self.config.burst, self.config.seed + index, index)
            chunk = self.emu.seed([p.body for p in plans])[0]
            self.epoch_seeded = [
                Seeded(sid, chunk.at, p) for sid, p in zip(chunk.ids, plans, strict=True)
            ]
            before = len(self.times)
            if not self.close_epoch(self.config.drain_timeout):
                raise RuntimeError(f"calibration burst {index + 1} was not answered in time")
            calls = sum(p.calls for p in plans)
            self.burst_calls += calls
            rates.append(calls / max(t for _, t in self.times[before:]))
        return rates

    def run(self) -> dict[str, Any]:
        """Calibrate, then the load with its samples, faults and epochs; the final drain."""
        bursts = self.calibrate()
        burst = statistics.median(bursts)
        rate = self.config.rate or self.config.share * burst
        source = (
            "--rate"
            if self.config.rate
            else f"{self.config.share:.0%} of the median of bursts of {_rates(bursts)}"
        )
        rates = Rates.split(rate, self.config.runs_share, self.config.inline_share)
        say(
            f"bursts of {self.config.burst} sessions: {_rates(bursts)} calls/s, median "
            f"{burst:.0f}; offering {rate:.1f} "
            f"({rates.sessions:.1f} in sessions, {rates.runs:.1f} in runs, "
            f"{rates.inline:.1f} in run_tool_calls)"
        )
        mix = self.mix = Mix(self.stack.origin, rates, self.config.seed, self.config.inline_timeout)
        self.started = time.monotonic()
        queues = self.queues = QueueWatch(
            f"{self.stack.base}/{self.stack.config.broker_db}", self.started
        )
        queues.start()
        mix.start()
        mix.resume()
        closed = False
        try:
            self.loop(mix)
            mix.pause()
            self.take()
            load_seconds = time.monotonic() - self.started
            self.sample()
            closed = self.close_epoch(self.config.final_timeout)
        finally:
            mix.stop()
            queues.stop()
        mix.check()
        if not closed:  # what is missing counts, and so do the watches left
            self.take()
            self.collect()
            self.watches_left = watched_runs(self.redis)
            self.tally_epoch()
            if self.intake is not None:
                self.pushes.add(self.emu)
        return {
            "rate_calls_per_s": rate,
            "rate_source": source,
            "rates_calls_per_s": rates.to_json(),
            "burst_calls_per_s": burst,
            "bursts_calls_per_s": bursts,
            "load_seconds": load_seconds,
            "answered_calls_per_s": (self.answered() - self.burst_calls) / load_seconds,
        }

    def answered(self) -> int:
        """Calls answered so far, of every source (the epoch's included)."""
        epoch = self._epoch_calls()
        epoch += sum(len(s["tool_outputs"]) for s in self.epoch_submits)
        epoch += sum(len(a.messages or []) for a in self.epoch_answers)
        return self.tally.answered + self.runs.answered + self.inline.answered + epoch

    def loop(self, mix: Mix) -> None:
        """Until the load's end: sample, close epochs, inject the scheduled faults.

        An epoch closes without blocking the samples: the seeder pauses, and once every
        session is answered the emulator forgets them and the load resumes. A fault that is
        due waits for the next fresh epoch, so a killed worker's recovery (its heartbeats'
        ``TOOLFAN_DEAD_AFTER``) runs under load rather than holding up a drain.
        """
        schedule = self.config.schedule()
        next_sample, next_epoch = 0.0, self.config.epoch
        closing: float | None = None
        while (now := time.monotonic() - self.started) < self.config.seconds:
            mix.check()
            self.take()
            self.collect()
            if now >= next_sample:
                self.sample()
                next_sample += self.config.interval
            if closing is None and now >= next_epoch:
                mix.pause()
                self.take()
                closing = now
            if closing is not None:
                closed = self.try_close()
                if closed or now - closing > self.config.drain_timeout:
                    self.postponed += not closed
                    mix.resume()
                    closing, next_epoch = None, now + self.config.epoch
                    if schedule and schedule[0][0] <= now:
                        self.inject(schedule.pop(0)[1], now)
            time.sleep(0.2)

    def inject(self, kind: str, now: float) -> None:
        """One scheduled fault."""
        self.events.append({"t": now, "kind": kind})
        say(f"{now:.0f} s: {kind.replace('_', ' ')}")
        if kind == "kill_worker":
            self.kill_victim()
        else:
            self.restart_poller()

    def sample(self) -> None:
        """One point of the time series, and its line of progress."""
        t = time.monotonic() - self.started
        sample: dict[str, Any] = {
            "t": t,
            "calls_answered": self.answered(),
            "sessions_seeded": self.tally.sessions + len(self.epoch_seeded),
            "runs_seeded": self.runs.runs + len(self.epoch_runs),
            "batches_answered": self.inline.batches + len(self.epoch_answers),
            "rss": {role: rss(pid) for role, pid in self.pids.items()},
            "redis": redis_sample(self.redis, {"broker": self.broker, "ledger": self.redis}),
            "connections": connections(
                self.pids, self.redis_port, {soak_report.BENCH: os.getpid()}
            ),
        }
        if self.queues is not None:  # the deepest each queue stood since the last sample
            last = self.series[-1]["t"] if self.series else -math.inf
            sample["queues"] = peaks(self.queues.snapshot(), last, t)
        recent = answer_times(self.epoch_seeded, self.epoch_batches)[-500:]
        sample["p95_recent"] = percentiles([d for _, d in recent])["p95"]
        self.series.append(sample)
        say(
            f"{t / 60:5.1f} min  {sample['calls_answered']:>9,} calls  "
            f"prefork {sample['rss']['worker-prefork'] / 1e6:5.0f} MB  "
            f"threads {sample['rss']['worker-threads'] / 1e6:5.0f} MB  "
            f"poller {sample['rss']['poller'] / 1e6:4.0f} MB  "
            f"runs poller {sample['rss']['poller-runs'] / 1e6:4.0f} MB  "
            f"redis {sample['redis']['used_memory'] / 1e6:5.1f} MB  "
            f"p95 {sample['p95_recent']:.3f} s"
        )

    def _epoch_calls(self) -> int:
        return sum(len(b["events"]) for b in self.epoch_batches)

    def close(self) -> None:
        """Release the soak's clients."""
        self.emu.close()
        self.redis.close()
        self.broker.close()


def windows(
    times: Sequence[tuple[float, float]], started_wall: float, width: float, end: float
) -> list[dict[str, Any]]:
    """p50/p95 of time to answer per window of seeding time (load seconds).

    ``sessions`` counts the answers of the window (sessions, runs' phases or batches).
    """
    out = []
    start = 0.0
    while start + width <= end:  # full windows only: a last stub holds a handful
        inside = [d for at, d in times if start <= at - started_wall < start + width]
        p = percentiles(inside)
        out.append({"start": start, "end": start + width, "sessions": len(inside), **p})
        start += width
    return out


@contextmanager
def soak_stack(config: SoakConfig) -> Iterator[tuple[BenchStack, ExitStack]]:
    """The bench's stack (emulator on databases 4 and 5), with the soak's ledger TTL."""
    bench = BenchConfig(
        out=config.out, redis_url=config.redis_url, private_redis=config.private_redis
    )
    workdir = config.out / "logs"
    workdir.mkdir(parents=True, exist_ok=True)
    with BenchStack(bench, workdir) as stack, ExitStack() as fleet_stack:
        ttl = str(config.ledger_ttl)
        stack.env.update(
            TOOLFAN_LEDGER_TTL=ttl,
            TOOLFAN_RESULT_EXPIRES=ttl,
            TOOLFAN_QUEUE_BUDGET=str(config.queue_budget),
            TOOLFAN_WEBHOOK_DEDUP_TTL=ttl,
        )
        from bench.run import use_stack_env

        use_stack_env(stack.env)
        yield stack, fleet_stack


def run_soak(config: SoakConfig) -> dict[str, Any]:
    """The whole soak; returns its document (also written to ``--out``)."""
    config = config.quick_sized() if config.quick else config
    config.out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with soak_stack(config) as (stack, fleet_stack):
        soak = Soak(config, stack, fleet_stack)
        try:
            intake = ", a webhook intake" if config.push else ""
            say(f"starting the fleet: prefork, threads and victim workers, three pollers{intake}")
            soak.start_fleet()
            info = soak.run()
            wall_zero = _wall_zero(soak)
        finally:
            soak.stop_fleet()
            soak.close()
    return document(
        config,
        soak,
        {**info, "started": started, "epochs": soak.epochs, "epochs_skipped": soak.postponed},
        wall_zero,
    )


def _api(path: str) -> str:
    """The prefix an API request's outcome is counted under: runs' apart from sessions'.

    Sessions' lost answers are replayed under their idempotency key; runs' are not (the
    protocol has none: toolfan reads the run instead), so the two are counted apart.
    """
    return "runs_" if path.startswith(RUNS_PATH) else "api_"


def _wall_zero(soak: Soak) -> float:
    """The wall-clock time of the load's start (answer times are the emulator's wall clock)."""
    return time.time() - (time.monotonic() - soak.started)


def document(
    config: SoakConfig, soak: Soak, info: dict[str, Any], wall_zero: float
) -> dict[str, Any]:
    """Everything the soak measured, with its verdicts."""
    api = {k.removeprefix("api_"): v for k, v in soak.faults.items() if k.startswith("api_")}
    runs = {k.removeprefix("runs_"): v for k, v in soak.faults.items() if k.startswith("runs_")}
    doc: dict[str, Any] = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "info": {
            **info,
            "cpus": os.cpu_count(),
            "faults_set": QUICK_FAULTS if config.quick else FAULTS,
            "push_faults_set": (QUICK_PUSH_FAULTS if config.quick else PUSH_FAULTS)
            if config.push
            else None,
        },
        "series": soak.series,
        "queues": soak.queues.snapshot() if soak.queues is not None else [],
        "windows": windows(soak.times, wall_zero, config.window, info["load_seconds"]),
        "windows_by_source": {
            name: windows(times, wall_zero, config.window, info["load_seconds"])
            for name, times in soak.source_times.items()
        },
        "events": soak.events,
        "faults": {
            "worker_kills": soak.faults["worker_kills"],
            "poller_restarts": soak.faults["poller_restarts"],
            "api": api,
            "api_runs": runs,
        },
        "tally": soak.tally.to_json(),
        "runs": {**soak.runs.to_json(), "watches_left": soak.watches_left},
        "inline": soak.inline.to_json(),
        "push": soak.pushes.to_json() if config.push else None,
        "memory": soak_report.memory_table(soak.series, config.warmup),
    }
    evaluated = soak_report.targets(doc)
    doc["targets_evaluated"] = evaluated
    return doc


def write(doc: dict[str, Any], out: Path) -> list[str]:
    """``soak.json``, ``soak.txt`` and ``soak.png``; returns the text."""
    text = soak_report.lines(doc)
    (out / "soak.txt").write_text("\n".join(text) + "\n")
    soak_report.draw(doc, out / "soak.png")
    data = {k: v for k, v in doc.items() if k != "targets_evaluated"}
    data["targets"] = [t.to_json() for t in doc["targets_evaluated"]]
    (out / "soak.json").write_text(json.dumps(data, indent=2, default=_finite) + "\n")
    return text


def _finite(value: object) -> object:
    return str(value)


def build_parser() -> argparse.ArgumentParser:
    """The soak's options, each defaulting to :class:`SoakConfig`'s value."""
    d = SoakConfig()
    p = argparse.ArgumentParser(
        prog="python -m bench soak",
        description="A long mixed load of sessions, watched runs and run_tool_calls batches "
        "with faults on (API errors, 429s, dropped 202s, slow answers; a worker SIGKILLed "
        "and a poller restarted every few minutes), sessions pushed to a webhook intake "
        "too (with dropped, duplicate, shuffled and stale events), sampling memory, Redis "
        "keys, watched runs, pub/sub channels, connections and p95. Writes soak.json, soak.txt and "
        "soak.png to --out. Exits 0 even when a verdict fails.",
    )
    p.add_argument(
        "--minutes", type=float, default=d.minutes, help=f"minutes of load ({d.minutes:g})"
    )
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help=f"calls/s to offer, all sources together (default: {d.share * 100:.0f} %% of the "
        "median calibration burst's)",
    )
    p.add_argument(
        "--bursts",
        type=int,
        default=d.bursts,
        help=f"calibration bursts of {d.burst} sessions, faults off; the load follows their "
        f"median ({d.bursts})",
    )
    p.add_argument(
        "--runs-share",
        type=float,
        default=d.runs_share,
        help="share of the offered calls in runs of the assistants source, watched with "
        f"watch_runs, of one or two phases ({d.runs_share * 100:.0f} %%)",
    )
    p.add_argument(
        "--inline-share",
        type=float,
        default=d.inline_share,
        help="share of the offered calls in toolfan.run_tool_calls batches from caller "
        f"threads of the soak ({d.inline_share * 100:.0f} %%); sessions take the rest",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=d.interval,
        help=f"seconds between samples ({d.interval:g})",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=d.warmup,
        help=f"seconds before the first steady sample ({d.warmup:g})",
    )
    p.add_argument(
        "--window",
        type=float,
        default=d.window,
        help=f"seconds of seeding per p95 window ({d.window:g})",
    )
    p.add_argument(
        "--epoch",
        type=float,
        default=d.epoch,
        help=f"seconds between emulator resets ({d.epoch:g})",
    )
    p.add_argument(
        "--kill-every",
        type=float,
        default=d.kill_every,
        help=f"seconds between worker SIGKILLs ({d.kill_every:g})",
    )
    p.add_argument(
        "--restart-every",
        type=float,
        default=d.restart_every,
        help=f"seconds between poller restarts ({d.restart_every:g})",
    )
    p.add_argument(
        "--ledger-ttl",
        type=int,
        default=d.ledger_ttl,
        help=f"TOOLFAN_LEDGER_TTL of the run ({d.ledger_ttl})",
    )
    p.add_argument(
        "--seed", type=int, default=d.seed, help=f"seed of the arrivals, mix and faults ({d.seed})"
    )
    p.add_argument("--out", default=str(d.out), help=f"output directory ({d.out})")
    p.add_argument(
        "--redis-url", default=None, help="Redis server to use (default: TOOLFAN_REDIS_URL's)"
    )
    p.add_argument(
        "--private-redis",
        action="store_true",
        help="start a private redis-server (clean server-wide figures)",
    )
    p.add_argument(
        "--quick", action="store_true", help="about 45 s with one fault of each kind (smoke test)"
    )
    p.add_argument(
        "--no-push",
        dest="push",
        action="store_false",
        help="do not push sessions to a toolfan webhook intake (by default every session "
        "that starts waiting is pushed, with the push channel's faults, and polled too)",
    )
    return p


#: Options that must be above zero: a zero or negative one would divide by zero, sleep
#: for ever, or end the run before it starts.
POSITIVE = (
    "minutes",
    "rate",
    "bursts",
    "interval",
    "warmup",
    "window",
    "epoch",
    "kill_every",
    "restart_every",
    "ledger_ttl",
)


#: Shares of the offered calls: each from 0 (that source left out) to below 1, together
#: below 1, so sessions keep a share (the calibration and the p95 verdict are theirs).
SHARES = ("runs_share", "inline_share")


def bad_option(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None (``--rate`` may be left out)."""
    for name in POSITIVE:
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"--{name.replace('_', '-')} must be a positive number, not {value!r}"
    shares = [getattr(args, name) for name in SHARES]
    if not all(math.isfinite(v) and 0 <= v < 1 for v in shares) or sum(shares) >= 1:
        return f"--runs-share and --inline-share must be from 0 to below 1 together, not {shares}"
    return None


def soak_config(args: argparse.Namespace) -> SoakConfig:
    """The configuration from the parsed options."""
    return SoakConfig(
        out=Path(args.out),
        minutes=args.minutes,
        rate=args.rate,
        bursts=args.bursts,
        runs_share=args.runs_share,
        inline_share=args.inline_share,
        interval=args.interval,
        warmup=args.warmup,
        window=args.window,
        epoch=args.epoch,
        kill_every=args.kill_every,
        restart_every=args.restart_every,
        ledger_ttl=args.ledger_ttl,
        seed=args.seed,
        redis_url=args.redis_url,
        private_redis=args.private_redis,
        quick=args.quick,
        push=args.push,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak, print its report; 0 even when a verdict fails (it measures, not judges)."""
    args = build_parser().parse_args(argv)
    problem = bad_option(args)
    if problem is not None:
        print(f"python -m bench soak: {problem}", file=sys.stderr)
        return 2
    config = soak_config(args)
    doc = run_soak(config)
    out = (config.quick_sized() if config.quick else config).out
    text = write(doc, out)
    print("\n".join(text), flush=True)
    say(f"wrote {out / 'soak.json'}, soak.txt and soak.png")
    return 0
