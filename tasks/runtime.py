"""The process singletons of the engine, in one place: settings, tools, ledgers, limits.

Each is made once per process, on first use, from the environment: a worker's pool
process, a poller and a CLI command each build their own, and every caller in a process
shares it. The protocols' clients are their sources' own (``dispatcher.sources``), since
the engine knows no protocol.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from handlers.limits import Limits
from handlers.policy import Policy, load_policy
from tasks import sources
from tasks.approvals import ApprovalStore
from tasks.envelope import LEGACY_SOURCE
from tasks.ledger import CallRef, Ledger
from tasks.liveness import Reaper
from tasks.settings import get_settings, load_registry
from tasks.upgrade import ensure_upgraded

__all__ = [
    "batch_label",
    "call_ids",
    "delivers_in_place",
    "get_approvals",
    "get_ledger",
    "get_limits",
    "get_policy",
    "get_settings",
    "load_registry",
    "new_reaper",
]


@cache
def get_ledger(source: str) -> Ledger:
    """The ledger of ``source`` in this process, on ``TOOLFAN_REDIS_URL`` (one client)."""
    return _ledger().scoped(source, _batches_end(source))


def _batches_end(source: str) -> bool:
    """Whether the source says its batches can end unanswered (a cancelled run)."""
    try:
        return bool(getattr(sources.get(source), "batches_end", False))
    except sources.UnknownSource:
        return False


@cache
def batch_label(source: str) -> str:
    """What the source calls a batch's id in log lines (``session_id`` for sessions)."""
    try:
        return str(getattr(sources.get(source), "batch_label", "batch_id"))
    except sources.UnknownSource:
        return "batch_id"


def call_ids(source: str, ref: CallRef, name: str) -> dict[str, Any]:
    """A call's identity in log lines and their JSON fields (the batch by its source's name)."""
    return {
        "source": source,
        batch_label(source): ref.batch_id,
        "turn_id": ref.turn_id,
        "call_id": ref.call_id,
        "function": name,
    }


@cache
def delivers_in_place(source: str) -> bool:
    """Whether the source's delivery may run in the worker that ran a batch's only call.

    A source opts in (``delivers_in_place = True``) when delivering is cheap and needs
    nothing a tool worker may lack (no API credentials, no slow HTTP): then a batch of
    one call skips its chord, and the ``submit`` task with it.
    """
    try:
        return bool(getattr(sources.get(source), "delivers_in_place", False))
    except sources.UnknownSource:
        return False


def new_reaper() -> Reaper:
    """A reaper on this process's ledger Redis and broker, with its liveness settings.

    Each caller gets its own, since a reaper's kombu connection is not for several
    threads at once: the poller's pass, the runs pollers and ``run_tool_calls``' looks.
    """
    from tasks.app import app  # the app's modules import this one

    settings = get_settings()
    return Reaper(
        _ledger().client, app.connection_for_write(), settings.dead_after, settings.heartbeat
    )


@cache
def _ledger() -> Ledger:
    settings = get_settings()
    ledger = Ledger.from_url(settings.redis_url, settings.ledger_ttl, LEGACY_SOURCE)
    ensure_upgraded(ledger.client)  # records of the version before sources, moved first
    return ledger


@cache
def get_limits() -> Limits:
    """The limits of this process, from the ``TOOLFAN_MAX_*`` settings."""
    return get_settings().limits


@cache
def get_approvals() -> ApprovalStore:
    """The approval inbox, in the ledger's Redis, kept as long as the call records."""
    settings = get_settings()
    return ApprovalStore(_ledger().client, settings.ledger_ttl)


@cache
def get_policy() -> Policy | None:
    """The policy ``TOOLFAN_POLICY`` names, if any (for tools without ``authorize=``).

    Raises:
        handlers.errors.RegistryError: it names nothing loadable (checked at start).
    """
    spec = get_settings().policy
    return load_policy(spec) if spec else None
