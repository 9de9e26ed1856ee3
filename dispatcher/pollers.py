"""The pollers of the sources ``TOOLFAN_SOURCES`` names, run as one pass.

``toolfan poll`` and beat's ``toolfan.poll`` task poll every configured source, one after
the other, each with its own client and ledger, all through the same dispatcher rules.
A source whose pass fails costs only itself: the others still run, and the pass reports
the failure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

from handlers.errors import ToolfanError
from tasks.settings import get_settings

log = logging.getLogger("toolfan.poll")


class Summary(Protocol):
    """What a source's pass reports."""

    def line(self) -> str:
        """One line for the terminal."""
        ...

    def as_dict(self) -> dict[str, int]:
        """The counters."""
        ...


class SourcePoller(Protocol):
    """A source's poller: one pass at a time, stoppable between requests."""

    stop: threading.Event | None

    def poll_once(self) -> Summary:
        """One pass."""
        ...


class UnknownSourceSetting(ToolfanError):
    """``TOOLFAN_SOURCES`` names a source toolfan cannot poll."""


@dataclass
class SourcesSummary:
    """The summaries of one pass over every source, by source."""

    parts: dict[str, Summary] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """One line per source."""
        lines = [s.line() for s in self.parts.values()]
        lines += [f"{name}: pass failed: {why}" for name, why in self.failures.items()]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The counters of each source (and its failure, if it failed)."""
        data: dict[str, Any] = {name: s.as_dict() for name, s in self.parts.items()}
        data.update({name: {"failed": why} for name, why in self.failures.items()})
        return data


class SourcesPoller:
    """Polls several sources in one pass."""

    def __init__(self, pollers: dict[str, SourcePoller]) -> None:
        self.pollers = pollers
        self._stop: threading.Event | None = None

    @property
    def stop(self) -> threading.Event | None:
        """The event that stops a pass between requests (shared by every source)."""
        return self._stop

    @stop.setter
    def stop(self, event: threading.Event | None) -> None:
        self._stop = event
        for poller in self.pollers.values():
            poller.stop = event

    def poll_once(self) -> SourcesSummary:
        """Each source's pass, in order; one that fails does not stop the others.

        Raises:
            ToolfanError: every source failed (the first failure), so cron sees it.
        """
        summary = SourcesSummary()
        first: BaseException | None = None
        for name, poller in self.pollers.items():
            try:
                summary.parts[name] = poller.poll_once()
            except ToolfanError as exc:
                first = first or exc
                summary.failures[name] = f"{type(exc).__name__}: {exc}"
                log.error("%s: poll pass failed: %s", name, exc)
        if first is not None and not summary.parts:
            raise first
        return summary

    def poll_new(self) -> SourcesSummary:
        """The newly watched runs read at once (see :mod:`dispatcher.wake`); sessions wait.

        Raises:
            ToolfanError: the runs' pass failed.
        """
        summary = SourcesSummary()
        for name, poller in self.pollers.items():
            read_new = getattr(poller, "poll_new", None)
            if read_new is not None:
                summary.parts[name] = read_new()
        return summary


def source_names(names: Sequence[str] | None = None) -> tuple[str, ...]:
    """The sources to poll, checked.

    Raises:
        UnknownSourceSetting: a name is not a source toolfan polls.
    """
    chosen = tuple(names if names is not None else get_settings().sources)
    unknown = [n for n in chosen if n not in (*POLLED, UNPOLLED)]
    if unknown or not chosen:
        raise UnknownSourceSetting(
            f"TOOLFAN_SOURCES: {', '.join(unknown) or '(empty)'} is not a source toolfan "
            f"knows; choose from {', '.join((*POLLED, UNPOLLED))}"
        )
    return chosen


def polled_names(names: Sequence[str] | None = None) -> tuple[str, ...]:
    """The configured sources a poll pass reads.

    Raises:
        UnknownSourceSetting: a name is unknown, or none of them is polled.
    """
    polled = tuple(n for n in source_names(names) if n in POLLED)
    if not polled:
        raise UnknownSourceSetting(
            f"TOOLFAN_SOURCES: {UNPOLLED} alone names nothing to poll (its calls are handed "
            "to the fleet by the application); add agents or assistants to poll"
        )
    return polled


#: The sources a poll pass can read.
POLLED = ("agents", "assistants")
#: The source no poll reads: an application's own tool calls. ``TOOLFAN_SOURCES=inline``
#: says a fleet serves only those (and the tool loop), so its workers need no API key.
UNPOLLED = "inline"


@cache
def process_pollers() -> SourcePoller:
    """The poller of this process for the configured sources, kept across passes.

    With the default ``TOOLFAN_SOURCES=agents`` this is the Agents poller itself, so its
    summary line is the one it always was.
    """
    from dispatcher.poll import process_poller
    from dispatcher.sources.assistants_poll import runs_poller
    from tasks.runtime import new_reaper

    names = polled_names()
    if names == ("agents",):
        return process_poller()
    pollers: dict[str, SourcePoller] = {}
    for name in names:
        pollers[name] = process_poller() if name == "agents" else runs_poller(new_reaper())
    return SourcesPoller(pollers)


def poll_sources() -> Summary:
    """One pass over every configured source, with this process's pollers."""
    return process_pollers().poll_once()
