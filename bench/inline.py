"""``toolfan.run_tool_calls`` on the bench's fleet: throughput and latency of inline batches.

An application that drives Chat Completions itself hands each model answer's tool calls to
:func:`toolfan.run_tool_calls` and waits for the ``tool`` messages. Here the bench process
is that application: callers in threads (each blocked on its batch's answer, as an
application's request handlers would be) keep the workload's workers busy with S batches
of K calls, so the calls/s compare with the raw Celery chords the same workers ran in the
same run. The callers' CPU is the application's, so it is reported apart from the
workers', as raw Celery's publisher CPU is.

On a warm fleet it also times what a single answer costs: one no-op call against calling
the tool in-process (the fleet's overhead over not using it), and one answer of eight
50 ms calls on the I/O workload's threads pool (the calls must run side by side).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery import chord

from bench import tools
from bench.config import Workload
from bench.engine import forget
from bench.figures import Measurement
from bench.measure import Window, percentiles
from bench.stack import SUBMIT_QUEUE, BenchStack
from dispatcher.devstack import Service

SYSTEM = "run_tool_calls"
#: Concurrent callers per worker process running calls: enough batches in flight that no
#: pool process waits for work, few enough that the callers' own CPU stays small.
CALLERS_PER_PROCESS = 4
#: Sequential warm-up answers before each latency series (connections, imports, pools).
WARM_UP = 5
#: Calls of the 50 ms tool in one answer for the parallel latency.
PARALLEL_CALLS = 8
ToolCall = dict[str, Any]


@dataclass(frozen=True)
class Answered:
    """One ``run_tool_calls`` call: when it started and returned, and what it returned."""

    call_ids: list[str]
    started: float
    ended: float
    messages: list[dict[str, Any]]

    @property
    def seconds(self) -> float:
        """Its wall time."""
        return self.ended - self.started


def chat_calls(count: int, tool: str, arguments: str) -> list[ToolCall]:
    """``message.tool_calls`` of one model answer, as an application holds them (dicts)."""
    return [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": tool, "arguments": arguments},
        }
        for i in range(count)
    ]


def call_fleet(calls: list[ToolCall], conversation: str, timeout: float) -> Answered:
    """One timed ``run_tool_calls`` of ``calls`` in a conversation of their own (a new batch)."""
    import toolfan

    started = time.perf_counter()
    messages = toolfan.run_tool_calls(calls, conversation_id=conversation, timeout=timeout)
    return Answered([c["id"] for c in calls], started, time.perf_counter(), messages)


def accounting(answers: Sequence[Answered]) -> dict[str, Any]:
    """Every call answered once, in order, with the tool's own output.

    ``answered`` counts the calls of answers that name each call once, in its place;
    ``successes`` the messages whose content is the tool's output; ``failures`` shows a few
    of the others (and of the answers that named other calls).
    """
    answered = successes = 0
    failures: list[str] = []
    for answer in answers:
        ids = [m.get("tool_call_id") for m in answer.messages]
        if ids == answer.call_ids:
            answered += len(ids)
        elif len(failures) < 5:
            failures.append(f"answered {ids} for {answer.call_ids}"[:200])
        for message in answer.messages:
            if message.get("role") == "tool" and message.get("content") == tools.OUTPUT:
                successes += 1
            elif len(failures) < 5:
                failures.append(str(message.get("content"))[:200])
    return {
        "batches": len(answers),
        "calls": sum(len(a.call_ids) for a in answers),
        "answered": answered,
        "successes": successes,
        "failures": failures,
    }


@contextmanager
def callers(count: int) -> Iterator[ThreadPoolExecutor]:
    """The application's request threads, started before any window opens."""
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="caller") as pool:
        list(pool.map(time.sleep, [0.01] * count))
        yield pool


def run_throughput(
    stack: BenchStack,
    workload: Workload,
    workers: list[Service],
    pool: tuple[ThreadPoolExecutor, int],
    batches: int | None = None,
) -> Measurement:
    """S batches of K no-op calls from the callers; calls/s from the first call to the last return.

    Redis commands are the whole server's over the window (callers' and workers'); the CPU
    per call is the workers'; the callers' is in ``extra``. ``pool`` is the callers' threads
    and how many they are.
    """
    threads, size = pool
    count = batches or workload.sessions
    tag = uuid.uuid4().hex[:12]
    calls = chat_calls(workload.calls, workload.tool, "{}")
    timeout = stack.config.timeout

    def one(index: int) -> Answered:
        return call_fleet(calls, f"bench-{tag}-{index}", timeout)

    window = Window(stack.redis(), [w.proc.pid for w in workers])
    answers = list(threads.map(one, range(count)))
    closed = window.close()
    total = count * workload.calls
    return Measurement(
        system=SYSTEM,
        workload=workload.name,
        sessions=count,
        calls=total,
        seconds=max(a.ended for a in answers) - min(a.started for a in answers),
        latency=percentiles([a.seconds for a in answers]),
        redis_commands_per_call=closed.total_commands / total,
        cpu_seconds_per_call=closed.cpu / total,
        extra={
            **accounting(answers),
            "callers": size,
            "redis_commands": closed.total_commands,
            "top_redis_commands": dict(list(closed.commands.items())[:12]),
            "cpu_seconds": closed.cpu,
            "caller_cpu_seconds": closed.bench_cpu,
            "caller_cpu_seconds_per_call": closed.bench_cpu / total,
        },
    )


def median(measurements: list[Measurement]) -> Measurement:
    """The repetition of median throughput (the lower middle one, as the bench's rows)."""
    ranked = sorted(measurements, key=lambda m: m.calls_per_s)
    return ranked[(len(ranked) - 1) // 2]


def throughput(
    stack: BenchStack, workload: Workload, workers: list[Service], say: Callable[[str], None]
) -> dict[str, Any]:
    """A warm-up, then ``--reps`` repetitions; the median's figures and every repetition's."""
    count = min(workload.sessions, CALLERS_PER_PROCESS * workload.processes * workload.workers)
    with callers(count) as threads:
        pool = (threads, count)
        run_throughput(stack, workload, workers, pool, min(workload.sessions, 2 * count))
        runs = []
        for _ in range(stack.config.reps):
            m = run_throughput(stack, workload, workers, pool)
            say(f"  {workload.name} {SYSTEM}: {m.calls_per_s:,.0f} calls/s")
            runs.append(m)
    return {
        "median": median(runs).to_json(),
        "calls_per_s": [m.calls_per_s for m in runs],
        "repetitions": [m.to_json() for m in runs],
    }


def samples(quick: bool, full: int, smoke: int) -> int:
    """A latency series' length: ``full``, or ``smoke`` in the quick bench."""
    return smoke if quick else full


def _series(
    calls: list[ToolCall], count: int, timeout: float
) -> tuple[list[Answered], list[Answered]]:
    """Warm-up answers, then ``count`` timed ones, one after another (a new batch each)."""
    tag = uuid.uuid4().hex[:12]
    warm = [call_fleet(calls, f"bench-warm-{tag}-{i}", timeout) for i in range(WARM_UP)]
    timed = [call_fleet(calls, f"bench-{tag}-{i}", timeout) for i in range(count)]
    return warm, timed


def in_process(count: int) -> list[float]:
    """Seconds of calling the no-op tool function directly, ``count`` times."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        tools.bench_noop()
        times.append(time.perf_counter() - started)
    return times


def raw_chords(stack: BenchStack, workload: Workload, calls: int, count: int) -> list[float]:
    """Seconds of one raw Celery chord of ``calls`` bare tasks, publish to callback, each.

    The engine's floor for an answer of that shape on the same workers: toolfan sends one
    chord per batch too, so its answer cannot come back sooner than this one does.
    """
    task = tools.raw_io if workload.arguments else tools.raw_noop
    client, timeout = stack.redis(), stack.config.timeout
    times = []
    for _ in range(WARM_UP + count):
        key = f"bench:raw-latency:{uuid.uuid4().hex}"
        started = time.perf_counter()
        header = [task.si(**workload.arguments).set(queue=workload.queue) for _ in range(calls)]
        body = tools.raw_collect.s(key, time.time()).set(queue=SUBMIT_QUEUE)
        forget(chord(header)(body))
        if client.blpop([key], timeout) is None:
            raise TimeoutError(f"raw Celery: a chord of {calls} did not finish in {timeout} s")
        times.append(time.perf_counter() - started)
    return times[WARM_UP:]


def raw_round_trips(stack: BenchStack, workload: Workload, count: int) -> list[float]:
    """Seconds of one bare Celery task, publish to its result in hand, each.

    No chord and no callback: the least any answer from the fleet can take on these
    workers (one message to a worker, one result back), whatever the engine's design.
    """
    timeout = stack.config.timeout
    times = []
    for _ in range(WARM_UP + count):
        started = time.perf_counter()
        tools.raw_noop.apply_async(queue=workload.queue).get(timeout=timeout)
        times.append(time.perf_counter() - started)
    return times[WARM_UP:]


def single_call(stack: BenchStack, workload: Workload) -> dict[str, Any]:
    """p50 of one no-op ``run_tool_calls`` over the p50 of calling the tool in-process.

    Raw Celery's chord of one bare task on the same workers is timed too: the part of the
    overhead that the engine itself takes.
    """
    count = samples(stack.config.quick, 200, 30)
    calls = chat_calls(1, workload.tool, "{}")
    warm, timed = _series(calls, count, stack.config.timeout)
    local = in_process(count)
    fleet = percentiles([a.seconds for a in timed])
    here = percentiles(local)
    raw = percentiles(raw_chords(stack, workload, 1, count))
    trip = percentiles(raw_round_trips(stack, workload, count))
    return {
        "samples": count,
        "warm_up": len(warm),
        "run_tool_calls": fleet,
        "in_process": here,
        "raw_celery_chord": raw,
        "raw_celery_task": trip,
        "raw_celery_task_over_in_process_p50": trip["p50"] - here["p50"],
        "overhead_p50": fleet["p50"] - here["p50"],
        "over_raw_celery_chord_p50": fleet["p50"] - raw["p50"],
        "mean": statistics.fmean(a.seconds for a in timed),
        **accounting(timed),
    }


def parallel_calls(stack: BenchStack, workload: Workload) -> dict[str, Any]:
    """p50 of one ``run_tool_calls`` of eight 50 ms calls, on the I/O workload's pool.

    With raw Celery's chord of eight bare 50 ms tasks on the same pool, for the floor.
    """
    count = samples(stack.config.quick, 100, 15)
    calls = chat_calls(PARALLEL_CALLS, workload.tool, json.dumps(workload.arguments))
    warm, timed = _series(calls, count, stack.config.timeout)
    raw = raw_chords(stack, workload, PARALLEL_CALLS, count)
    return {
        "samples": count,
        "warm_up": len(warm),
        "raw_celery_chord": percentiles(raw),
        "calls_per_answer": PARALLEL_CALLS,
        "tool_ms": workload.arguments.get("ms"),
        "pool": f"{workload.workers} x {workload.processes} {workload.pool or 'prefork'}",
        "latency": percentiles([a.seconds for a in timed]),
        **accounting(timed),
    }


def run_inline(
    stack: BenchStack,
    workload: Workload,
    workers: list[Service],
    inline: dict[str, Any],
    say: Callable[[str], None],
) -> None:
    """The rows of ``run_tool_calls`` that ``workload``'s running workers serve, into ``inline``.

    The no-op workers (the default pool) give the throughput and the single call's
    overhead; the I/O workers (threads) the answer of eight 50 ms calls.
    """
    if not workload.arguments:
        say(f"{workload.name}: run_tool_calls, {workload.sessions} batches of {workload.calls}")
        inline["throughput"] = throughput(stack, workload, workers, say)
        say(f"{workload.name}: one run_tool_calls call at a time, warm fleet")
        inline["single_call"] = single_call(stack, workload)
    else:
        say(f"{workload.name}: run_tool_calls of {PARALLEL_CALLS} calls, warm fleet")
        inline["parallel"] = parallel_calls(stack, workload)
