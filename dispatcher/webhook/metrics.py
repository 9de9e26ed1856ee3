"""The intake's metrics: deliveries by outcome and event type, and push-to-dispatch time.

Labels are bounded: outcomes are this module's words, event types the known ones or
``other`` (a forged delivery never reaches the type label: it is refused first).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

DELIVERIES = Counter(
    "toolfan_webhook_deliveries",
    "Webhook deliveries by outcome (accepted, duplicate, ignored, bad_request, "
    "unauthorized, too_large, busy, unavailable) and event type",
    ["outcome", "event"],
)
PUSH_TO_DISPATCH = Histogram(
    "toolfan_webhook_push_to_dispatch_seconds",
    "Seconds from a delivery's arrival at the intake to its session's dispatch",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10),
)
PUSHES = Counter(
    "toolfan_webhook_dispatches",
    "Targeted dispatches of pushed sessions, by result (dispatched, nothing_pending, "
    "filtered, gone, unreadable)",
    ["result"],
)
APPROVALS_WAITING = Gauge(
    "toolfan_approvals_pending", "Calls waiting for a person's approval, at the last scrape"
)
APPROVAL_NEAREST = Gauge(
    "toolfan_approval_nearest_deadline_seconds",
    "Seconds before the nearest approval deadline (+Inf when none waits), at the last scrape",
)
PENDING_BYTES = Gauge(
    "toolfan_webhook_pending_bytes",
    "Bytes of deliveries being received and not yet verified, every connection together "
    "(at most TOOLFAN_WEBHOOK_MAX_PENDING_BYTES), at the last scrape",
)
CLOSED = Counter(
    "toolfan_webhook_connections_closed",
    "Intake connections closed unanswered, by reason (silent: nothing sent within the "
    "keep-alive time of opening; slow: a request not whole within 30 s of its first byte)",
    ["reason"],
)


def read_approvals(count: int, nearest: float | None, now: float) -> None:
    """Set the approval gauges: how many wait, and the nearest deadline (epoch seconds)."""
    APPROVALS_WAITING.set(count)
    APPROVAL_NEAREST.set(max(0.0, nearest - now) if nearest is not None else float("inf"))
