"""Prometheus metrics of workers and pollers, safe for prefork worker pools.

With ``PROMETHEUS_MULTIPROC_DIR`` set (required for prefork workers), every process writes
its samples to that directory and the HTTP endpoint, served by the worker's main process or
by the poller, aggregates them. ``TOOLFAN_METRICS_PORT`` turns the endpoint on.

Function names become label values only for registered tools (others are ``<unknown>``),
so a model inventing names cannot blow up the number of series.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
    start_http_server,
)

from tasks.settings import SettingsError

log = logging.getLogger("toolfan.metrics")

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # samples are files there, from the first one
    Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

UNKNOWN_FUNCTION = "<unknown>"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

CALLS = Counter(
    "toolfan_calls", "Function calls finished, by function and outcome", ["function", "outcome"]
)
CALL_DURATION = Histogram(
    "toolfan_call_duration_seconds", "Time a function ran", ["function"], buckets=_LATENCY_BUCKETS
)
TIME_TO_SUBMIT = Histogram(
    "toolfan_time_to_submit_seconds",
    "Time from a session first seen pending to its batch accepted",
    buckets=_LATENCY_BUCKETS,
)
SUBMIT_ATTEMPTS = Counter(
    "toolfan_submit_attempts", "Events batches sent, by HTTP status or failure", ["status"]
)
APPROVALS = Counter(
    "toolfan_approvals",
    "Approvals asked for and how they ended: requested, approved, denied, timed_out",
    ["decision"],
)
ABANDONED = Counter("toolfan_abandoned_calls", "Calls whose results the API refused for good")
SESSIONS_PENDING = Gauge(
    "toolfan_sessions_pending",
    "Sessions with function calls pending at the last poll",
    multiprocess_mode="livemax",
)
STALE_CLAIMS = Gauge(
    "toolfan_stale_claims",
    "Claimed sessions whose dispatch outran its tools' timeouts, at the last poll",
    multiprocess_mode="livemax",
)
LEDGER_ERRORS = Counter(
    "toolfan_ledger_errors", "Ledger operations that failed because Redis did not answer"
)
CONFIG_ERRORS = Counter(
    "toolfan_config_errors",
    "API requests refused because of toolfan's settings (key, URL, DNS, TLS), by kind",
    ["kind"],
)
REFUSED_RESULTS = Counter(
    "toolfan_refused_results",
    "Results the API refused, sent again as an error so their batch could go through",
)
STUCK_CALLS = Gauge(
    "toolfan_stuck_calls",
    "Calls that overran their timeout and whose threads would not stop",
    multiprocess_mode="livesum",
)
ORPHANS = Counter(
    "toolfan_orphans",
    "Messages of dead workers put back on their queues before the visibility timeout",
)
WORKERS_ALIVE = Gauge(
    "toolfan_workers_alive",
    "Workers whose heartbeat is fresh, as seen by the last heartbeat or poll",
    multiprocess_mode="livemax",
)
POLL_ERRORS = Counter(
    "toolfan_poll_errors",
    "Unreadable sessions, entries and pages, and passes cut short, by kind",
    ["kind"],
)
POLL_DURATION = Histogram(
    "toolfan_poll_duration_seconds", "Duration of one poll pass", buckets=_LATENCY_BUCKETS
)


def function_label(name: str, known: bool) -> str:
    """The label value for a function name: registered names only."""
    return name if known else UNKNOWN_FUNCTION


def serve(port: int) -> None:
    """Serve ``/metrics`` on ``port``, aggregating all processes in multiprocess mode."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    registry = None
    if directory:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    start_http_server(port, registry=registry) if registry else start_http_server(port)
    log.info("metrics on :%d/metrics%s", port, " (multiprocess)" if directory else "")


def port_from_env() -> int | None:
    """``TOOLFAN_METRICS_PORT`` as an int, or None when metrics are off.

    Raises:
        SettingsError: for anything but a port number, so a start is refused with the
            variable's name rather than a traceback (or, in a worker's start-up signal,
            a log line and no metrics).
    """
    value = os.environ.get("TOOLFAN_METRICS_PORT", "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
        raise SettingsError(f"TOOLFAN_METRICS_PORT: not a port number (1 to 65535): {value[:40]!r}")
    return int(value)


def process_exited(pid: int) -> None:
    """Drop a dead worker process's live gauges (multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
