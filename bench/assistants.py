"""The no-op workload on the run-shaped ``assistants`` source, against the same workers.

A user of the Assistants protocol starts runs and names them to toolfan (``watch_runs``):
the protocol lists no waiting runs. So the bench seeds S runs of K no-op calls in the
emulator at once, watches them all as the user would, and measures until every run has
its one accepted ``submit_tool_outputs``. The clock starts when the watch starts (the
user's own work, before any API request), and stops at the last accepted submit. The
calls run on the no-op workload's workers, the very processes raw Celery's chords ran on;
the runs are found and read by a second ``toolfan poll`` with ``TOOLFAN_SOURCES=assistants``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.config import Workload
from bench.emu import JSON, Emulator
from bench.figures import ASSISTANTS, SPLIT, Measurement
from bench.measure import Closed, CpuSplit, Window, percentiles
from bench.stack import BenchStack
from dispatcher.devstack import Service, wait_for

#: The emulator's run paths (the OpenAI flavour the bench's ``OPENAI_BASE_URL`` selects).
RUNS_PATH = "/v1/threads/"
#: Seconds to wait for the poller to drop the watches of completed runs after a repetition.
DRAIN_TIMEOUT = 60.0


@dataclass(frozen=True)
class SeededRuns:
    """Runs created by one bulk request, and the server time they became pending."""

    runs: list[tuple[str, str]]
    at: float


def run_body(workload: Workload) -> JSON:
    """One run waiting in ``requires_action`` for the workload's K calls (one phase)."""
    call = {"name": workload.tool, "arguments": workload.arguments}
    return {"phases": [[call] * workload.calls]}


def seed_runs(emu: Emulator, bodies: Sequence[JSON]) -> SeededRuns:
    """Create the runs in one bulk request (they become pending together)."""
    answer = emu.http.post("/runs/bulk", json={"runs": list(bodies)})
    data = answer.raise_for_status().json()
    return SeededRuns([(r["thread_id"], r["run_id"]) for r in data["data"]], float(data["at"]))


def submits(emu: Emulator, offset: int = 0) -> list[JSON]:
    """Accepted submits from ``offset`` on, in acceptance order."""
    answer = emu.http.get("/submits", params={"offset": offset})
    data: list[JSON] = answer.raise_for_status().json()["data"]
    return data


def wait_submits(
    emu: Emulator,
    expected: int,
    timeout: float,
    on_new: Callable[[list[JSON]], None] | None = None,
    every: float = 0.25,
) -> list[JSON]:
    """Every submit, once ``expected`` runs have one (reading only new submits).

    ``on_new`` is given each look's new submits, in acceptance order, as they arrive.

    Raises:
        TimeoutError: with how many arrived, when ``timeout`` passes first.
    """
    deadline = time.monotonic() + timeout
    seen: list[JSON] = []
    while True:
        fresh = submits(emu, len(seen))
        seen += fresh
        if fresh and on_new is not None:
            on_new(fresh)
        if len({(s["thread_id"], s["run_id"]) for s in seen}) >= expected:
            return seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(seen)} submits after {timeout:.0f} s; expected {expected}")
        time.sleep(every)


@contextmanager
def runs_poller(stack: BenchStack) -> Iterator[Service]:
    """``toolfan poll --interval`` with ``TOOLFAN_SOURCES=assistants`` (a ``runs:`` line a pass)."""
    env = {**stack.env, "TOOLFAN_SOURCES": "assistants"}
    argv = ["poll", "--interval", str(stack.config.poll_interval)]
    service = stack.track(Service(argv, stack.workdir / "poller-runs.log", env), "runs poller")
    try:
        service.wait_for_output("runs:", 60)
        yield service
    finally:
        service.stop()


def runs_passes(poller: Service) -> int:
    """Passes the runs poller has finished so far (one ``runs:`` line each)."""
    return sum(
        1 for line in poller.log().splitlines() if line.startswith("runs: ") and "seen" in line
    )


def watched(stack: BenchStack) -> int:
    """How many runs toolfan watches now (the poller drops a run's watch once it is over)."""
    from dispatcher.sources.assistants_watch import Watches

    client = stack.redis()
    try:
        return len(Watches(client))
    finally:
        client.close()


def run_assistants(
    stack: BenchStack,
    emu: Emulator,
    workload: Workload,
    services: tuple[list[Service], Service],
    runs: int | None = None,
) -> Measurement:
    """Seed the runs at once, watch them, measure until every one has its submit.

    Args:
        stack: The running stack.
        emu: Its emulator's admin client.
        workload: What each run waits for (the no-op workload).
        services: The workload's workers and the runs poller (their CPU counts).
        runs: Fewer runs than the workload's sessions (a warm-up).
    """
    from toolfan import watch_runs

    count = runs or workload.sessions
    workers, poller = services
    emu.reset()
    passes_before = runs_passes(poller)
    window = Window(stack.redis(), [*(w.proc.pid for w in workers), poller.proc.pid])
    split = CpuSplit(
        [w.proc.pid for w in workers], {"poller": poller.proc.pid, "api": stack.emulator_pid}
    )
    seeded = seed_runs(emu, [run_body(workload)] * count)
    # The user's work starts here: naming the runs is what makes them answerable.
    started = time.time()
    newly_watched = watch_runs(seeded.runs)
    watch_seconds = time.time() - started
    answered = wait_submits(emu, count, stack.config.timeout)
    closed = window.close()
    calls = count * workload.calls
    by_process = split.per_call(calls)
    passes = runs_passes(poller) - passes_before
    requests = run_requests(emu, started)
    _drain(stack)
    return runs_measurement(
        (ASSISTANTS, workload, count),
        (answered, seeded, started),
        closed.total_commands,
        closed.cpu,
        {
            **_accounting(answered, seeded, newly_watched),
            **_costs(closed, requests, passes),
            "poller_cpu_seconds": by_process["poller"] * calls / 1000,
            SPLIT: by_process,
            "watch_seconds": watch_seconds,
            "watch_to_first_request": (min(requests["times"]) - started)
            if requests["times"]
            else None,
        },
    )


def runs_measurement(
    row: tuple[str, Workload, int],
    runs: tuple[list[JSON], SeededRuns, float],
    commands: int,
    cpu: float,
    extra: dict[str, Any],
) -> Measurement:
    """A runs row's figures, the runs row's and the runs floor's alike.

    ``row`` is (system, workload, runs); ``runs`` the accepted submits, the seeded runs and
    the moment the clock started; then the Redis commands and CPU seconds of the window.
    """
    system, workload, count = row
    answered, seeded, started = runs
    calls = count * workload.calls
    return Measurement(
        system=system,
        workload=workload.name,
        sessions=count,
        calls=calls,
        seconds=max(s["received_at"] for s in answered) - started,
        latency=percentiles([s["received_at"] - seeded.at for s in answered]),
        redis_commands_per_call=commands / calls,
        cpu_seconds_per_call=cpu / calls,
        extra=extra,
    )


def _accounting(answered: list[JSON], seeded: SeededRuns, newly_watched: int) -> dict[str, Any]:
    """Each run answered exactly once, with every one of its calls, none failed."""
    per_run: dict[tuple[str, str], int] = {}
    for s in answered:
        key = (s["thread_id"], s["run_id"])
        per_run[key] = per_run.get(key, 0) + 1
    outputs = [o["output"] for s in answered for o in s["tool_outputs"]]
    return {
        "runs": len(seeded.runs),
        "runs_watched": newly_watched,
        "submits": len(answered),
        "runs_answered": len(per_run),
        "runs_answered_once": sum(1 for key in seeded.runs if per_run.get(key) == 1),
        "outputs": len(outputs),
        "failed_outputs": sum(1 for o in outputs if is_error(o)),
        "lost_answers": sum(1 for s in answered if s["lost"]),
    }


def is_error(output: str) -> bool:
    """Whether an output is toolfan's failure text, ``{"error": "..."}``."""
    try:
        value = json.loads(output)
    except ValueError:
        return False
    return isinstance(value, dict) and "error" in value


def _costs(closed: Closed, requests: dict[str, Any], passes: int) -> dict[str, Any]:
    """The raw counters: Redis commands, CPU, and the API requests by kind."""
    return {
        "retrieve_requests": requests["retrieve"],
        "submit_requests": requests["submit"],
        "poll_passes": passes,
        "redis_commands": closed.total_commands,
        "top_redis_commands": dict(list(closed.commands.items())[:12]),
        "cpu_seconds": closed.cpu,
    }


def run_requests(emu: Emulator, since: float) -> dict[str, Any]:
    """Run reads (poller and deliveries) and submits the API received since ``since``."""
    data = emu.http.get("/requests", params={"path": RUNS_PATH}).raise_for_status().json()
    records = [r for r in data["data"] if float(r["at"]) >= since]
    submit = sum(1 for r in records if r["path"].endswith("/submit_tool_outputs"))
    return {
        "retrieve": sum(1 for r in records if r["method"] == "GET"),
        "submit": submit,
        "times": [float(r["at"]) for r in records],
    }


def _drain(stack: BenchStack) -> None:
    """Wait for the poller to drop every watch (the runs complete a turn after their submit).

    Outside the measured window: the next repetition must start with nothing watched, or
    its poller would read the previous runs (404 after the reset) on the clock.
    """
    wait_for(lambda: watched(stack) == 0, DRAIN_TIMEOUT, "the runs' watches to drain", 0.1)


def measure_assistants(
    stack: BenchStack, emu: Emulator, workload: Workload, workers: list[Service], warm_up: int
) -> tuple[list[Measurement], list[Measurement]]:
    """The runs row and the runs floor, in turn: a warm-up, then ``--reps`` pairs.

    The runs row has its own runs poller on the same workers; the runs floor reads the runs
    itself (the poller watches none of them, so it only looks at an empty watch list).
    """
    from bench.floor_runs import run_runs_floor
    from bench.run import repeat

    ours: list[Measurement] = []
    floor: list[Measurement] = []
    with runs_poller(stack) as poller:
        run_assistants(stack, emu, workload, (workers, poller), warm_up)
        run_runs_floor(stack, emu, workload, workers, warm_up)
        for _ in range(stack.config.reps):
            floor.append(repeat(run_runs_floor, stack, emu, workload, workers))
            ours.append(repeat(run_assistants, stack, emu, workload, (workers, poller)))
    return ours, floor
