"""``toolfan demo``: the whole path on one machine, seeded, watched and summarised.

Starts (or reuses) Redis, the emulator, a worker and a poller of both sources; seeds
Agents sessions whose calls cover every outcome (valid, invalid arguments, unknown
function, a failing tool, an approval request that must stay untouched, two turns in one
session) and Assistants runs of one or two phases, watched as an application would; shows
progress while they are answered; prints a summary table; runs one tool-loop conversation
per API (Chat Completions, Responses) with ``toolfan chat`` and prints their traces; and
stops everything it started.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import redis

from dispatcher.devstack import Service, free_port, private_redis, redis_answers

SESSIONS = 50
RUNS = 10
TIMEOUT = 90.0
_APPROVAL = {
    "type": "mcp_approval_request",
    "turn_id": "turn_1",
    "request_id": "mcpr_demo",
    "request": {"server_label": "docs", "name": "search", "arguments": "{}"},
}


@dataclass
class Seeded:
    """What the demo seeded and when, to time and check the answers."""

    at: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    untouched: list[str] = field(default_factory=list)


def _call(name: str, arguments: Any, turn: str = "turn_1") -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "turn_id": turn}


def session_calls(i: int) -> list[dict[str, Any]]:
    """The calls of demo session ``i``: a realistic mix, one unusual case per session."""
    start = (datetime.now(UTC) + timedelta(days=1 + i % 5)).isoformat()
    calls = [
        _call("get_customer", {"customer_id": ("123", "456", "789")[i % 3]}),
        _call("get_weather", {"city": ("Paris", "Oslo", "Lima", "Tokyo")[i % 4]}),
    ]
    unusual = [
        _call("create_calendar_event", {"event": {"title": f"Review {i}", "start": start}}),
        _call("get_weather", {"city": "Paris", "unit": "kelvin"}),  # invalid arguments
        _call("book_flight", {"to": "Rome"}),  # unknown function
        _call("get_customer", {"customer_id": "999"}),  # the tool fails on purpose
        _call("issue_refund", {"args": {"order_id": f"ord_{i}", "amount_cents": 1250}}),
    ][i % 5]
    calls.append(unusual)
    if i % 10 == 0:
        calls.append(_call("get_weather", {"city": "Rome"}, turn="turn_2"))
    return calls


def seed(admin: httpx.Client, count: int) -> Seeded:
    """Create the demo sessions, plus one approval request to leave alone."""
    seeded = Seeded()
    for i in range(count):
        calls = session_calls(i)
        body = {"function_calls": calls, "metadata": {"demo": "1"}}
        sid = admin.post("/sessions", json=body).raise_for_status().json()["id"]
        seeded.at[sid], seeded.calls[sid] = time.time(), len(calls)
    approval = admin.post("/sessions", json={"required_actions": [_APPROVAL]})
    seeded.untouched.append(approval.raise_for_status().json()["id"])
    return seeded


def run_phases(i: int) -> list[list[dict[str, Any]]]:
    """The phases of demo run ``i``: a lookup, then (every other run) a forecast."""
    first = [
        {"name": "get_customer", "arguments": json.dumps({"customer_id": "123"})},
        {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})},
    ]
    if i % 4 == 3:
        first.append({"name": "get_weather", "arguments": "{not json"})  # invalid JSON
    second = [{"name": "get_weather", "arguments": json.dumps({"city": "Lima"})}]
    return [first, second] if i % 2 else [first]


def seed_runs(admin: httpx.Client, count: int, redis_url: str) -> dict[tuple[str, str], int]:
    """Create the demo runs and watch them; their phase counts by (thread, run)."""
    from dispatcher.sources.assistants_watch import Watches

    phases: dict[tuple[str, str], int] = {}
    for i in range(count):
        run = admin.post("/runs", json={"phases": run_phases(i)}).raise_for_status().json()
        phases[(run["thread_id"], run["id"])] = len(run_phases(i))
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        Watches(client).add(phases)
    return phases


def runs_done(admin: httpx.Client, runs: dict[tuple[str, str], int]) -> int:
    """How many demo runs completed."""
    data = admin.get("/runs").raise_for_status().json()["data"]
    return sum(
        1 for r in data if (r["thread_id"], r["run_id"]) in runs and r["status"] == "completed"
    )


def run_submits(admin: httpx.Client, runs: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    """The accepted submits of the demo runs."""
    data: list[dict[str, Any]] = admin.get("/submits").raise_for_status().json()["data"]
    return [s for s in data if (s["thread_id"], s["run_id"]) in runs]


def batches_of(admin: httpx.Client, sessions: set[str] | dict[str, Any]) -> list[dict[str, Any]]:
    """The accepted batches of the given sessions."""
    data: list[dict[str, Any]] = admin.get("/batches").raise_for_status().json()["data"]
    return [b for b in data if b["session_id"] in sessions]


def watch(
    admin: httpx.Client, seeded: Seeded, runs: dict[tuple[str, str], int], timeout: float
) -> list[dict[str, Any]]:
    """Print progress until every session has a batch and every run completed."""
    deadline, total = time.monotonic() + timeout, len(seeded.at)
    while True:
        batches = batches_of(admin, seeded.at)
        done = len({b["session_id"] for b in batches})
        finished = runs_done(admin, runs)
        over = done == total and finished == len(runs)
        end = "\n" if over or not sys.stdout.isatty() else "\r"
        print(f"answered {done}/{total} sessions, {finished}/{len(runs)} runs", end=end, flush=True)
        if over or time.monotonic() > deadline:
            return batches
        time.sleep(0.5)


def summary(seeded: Seeded, batches: list[dict[str, Any]]) -> tuple[str, bool]:
    """The summary table, and whether every session was answered exactly once."""
    events = [e for b in batches for e in b["events"]]
    waits = sorted(b["received_at"] - seeded.at[b["session_id"]] for b in batches)
    p95 = statistics.quantiles(waits, n=20, method="inclusive")[18] if len(waits) > 1 else None
    rows = [
        ("sessions", len(seeded.at)),
        ("calls", sum(seeded.calls.values())),
        ("succeeded", sum(1 for e in events if e["success"])),
        ("failed", sum(1 for e in events if not e["success"])),
        ("batches", len(batches)),
        ("p50 seed to answer", f"{statistics.median(waits):.2f} s" if waits else "-"),
        ("p95 seed to answer", f"{p95:.2f} s" if p95 is not None else "-"),
    ]
    table = "\n".join(f"  {name:<20} {value:>10}" for name, value in rows)
    once = len(batches) == len(seeded.at) == len({b["session_id"] for b in batches})
    return table, once and len(events) == sum(seeded.calls.values())


def _env(redis_url: str, port: int, workdir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "TOOLFAN_REDIS_URL": redis_url,
        "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "OPENAI_API_KEY": "demo",
        "TOOLFAN_SOURCES": "agents,assistants",
        "TOOLFAN_EXAMPLES_DB": str(workdir / "examples.sqlite3"),
    }
    env.pop("TOOLFAN_BROKER_URL", None)
    env.setdefault("TOOLFAN_HANDLERS", "handlers.examples")
    return env


@contextmanager
def stack(workdir: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """Redis, emulator, worker and poller; yields the emulator's admin URL, Redis's, the env."""
    with ExitStack() as stop:
        url = os.environ.get("TOOLFAN_REDIS_URL", "redis://localhost:6379/0")
        if not redis_answers(url):
            url = stop.enter_context(private_redis()) + "/0"
        port = free_port()
        env = _env(url, port, workdir)
        for name, args, ready in (
            ("emulator", ["emulator", "--port", str(port), "--log-level", "warning"], "listening"),
            ("worker", ["worker", "-c", "2", "-n", f"demo-{port}@%h"], " ready."),
            ("poller", ["poll", "--interval", "0.5"], "poll:"),
        ):
            service = Service(args, workdir / f"{name}.log", env)
            stop.callback(service.stop)
            print(f"starting {name} (log: {service.log_path})", flush=True)
            service.wait_for_output(ready, 60)
        yield f"http://127.0.0.1:{port}/_emulator", url, env


#: The demo's conversations: one per API, on the emulator's built-in script (it calls the
#: weather and customer tools in parallel, then answers quoting their outputs).
CONVERSATIONS = (
    ("chat", "What is the weather in Paris, and who is customer 123?"),
    ("responses", "Same question, through the Responses API: weather in Paris, customer 123?"),
)


def converse(env: dict[str, str], timeout: float) -> bool:
    """Run the demo's conversations with ``toolfan chat``, printing their traces."""
    ok = True
    for api, prompt in CONVERSATIONS:
        print(f"toolfan chat --api {api} {prompt!r}", flush=True)
        argv = [sys.executable, "-m", "dispatcher.cli", "chat", prompt, "--api", api]
        argv += ["--model", "demo-model", "--timeout", str(timeout)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)  # noqa: S603
        trace = done.stderr.strip().splitlines()
        ending = [line for line in trace if line.startswith("[")]
        steps = [line for line in trace if not line.startswith("[")]
        for line in [*steps, *done.stdout.strip().splitlines(), *ending]:
            print(f"  {line}", flush=True)
        ok = ok and done.returncode == 0
    return ok


def run_demo(sessions: int = SESSIONS, timeout: float = TIMEOUT, runs: int = RUNS) -> int:
    """Run the demo; 0 when every session and every run phase was answered exactly once."""
    with (
        tempfile.TemporaryDirectory(prefix="toolfan-demo-") as tmp,
        stack(Path(tmp)) as (url, redis_url, env),
        httpx.Client(base_url=url, timeout=10) as admin,
    ):
        seeded = seed(admin, sessions)
        calls = sum(seeded.calls.values())
        print(
            f"seeded {sessions} sessions with {calls} calls, and one approval request "
            "to leave alone",
            flush=True,
        )
        watched = seed_runs(admin, runs, redis_url)
        print(f"started and watched {runs} Assistants runs", flush=True)
        batches = watch(admin, seeded, watched, timeout)
        left_alone = not batches_of(admin, set(seeded.untouched))
        submits = run_submits(admin, watched)
        done = runs_done(admin, watched)
        conversed = converse(env, timeout)
    table, once = summary(seeded, batches)
    print(table)
    print(f"  {'runs':<20} {runs:>10}")
    print(f"  {'run phases submitted':<20} {len(submits):>10}")
    runs_once = done == runs and len(submits) == sum(watched.values())
    ok = once and left_alone and runs_once and conversed
    print(
        "demo: every session answered exactly once, every run phase submitted once, the "
        "approval request left alone, both conversations completed"
        if ok
        else "demo: FAILED: see the table above and the logs",
        flush=True,
    )
    return 0 if ok else 1
