"""The registry of sources: where batches of calls come from and where results go back.

A *source* is one protocol: Agents API sessions, Assistants-style runs, an application's
own list of tool calls. The engine (claims, ledger, chords, execute, delivery) knows none of
them; it knows a source by its name, carried by every batch, and asks it to deliver. So
``tasks`` never imports a protocol: sources register themselves here, found through the
``toolfan.sources`` entry points of the installed packages (toolfan's own are declared in
its ``pyproject.toml``), the way tools are found through ``TOOLFAN_HANDLERS``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from importlib import import_module, metadata
from typing import Any, Protocol, runtime_checkable

from tasks.delivery import Delivered

#: The entry-point group a package declares its sources in (``name = "module:OBJECT"``).
ENTRY_POINTS = "toolfan.sources"
#: The entry-point group of modules that define more Celery tasks (``name = "module"``),
#: imported by every worker at start: the triggers' tasks (beat's poll) live there.
TASK_MODULES = "toolfan.tasks"


@runtime_checkable
class Source(Protocol):
    """One protocol's side of the engine: deliver one batch of results.

    ``results`` are the engine's result payloads (the call's ids, ``name``, ``success``,
    ``output`` or ``error``, ``outcome``), one per call of the batch, in no set order.
    """

    name: str
    #: Optional: ``batch_label`` (what log lines call a batch id, default ``batch_id``),
    #: ``batches_end`` (whether a batch can end unanswered, default False),
    #: ``delivers_in_place`` (whether the worker that ran a batch's only call may deliver
    #: it itself, default False: only for a cheap delivery that needs no API credentials)
    #: and ``batch_ids(batch_id)`` (the batch's own ids by name, for a call's context;
    #: raises ValueError for an id not its own).

    def deliver(self, batch_id: str, results: Sequence[Mapping[str, Any]]) -> Delivered:
        """Send every result of one batch in one delivery.

        Raises:
            tasks.delivery.RetryLater: not taken yet; the engine sends it again.
            tasks.delivery.Misconfigured: a setting is wrong; the batch is kept.
            tasks.delivery.Refused: refused for good (``item`` names the one bad result).
        """
        ...


class UnknownSource(LookupError):
    """No installed package provides a source of this name."""


_REGISTERED: dict[str, Source] = {}
_LOCK = threading.Lock()


def register(source: Source) -> Source:
    """Make ``source`` known by its name (a later registration of the name replaces it)."""
    with _LOCK:
        _REGISTERED[source.name] = source
    return source


def get(name: str) -> Source:
    """The source called ``name``, loading its package's entry point the first time.

    Raises:
        UnknownSource: no installed package declares it.
    """
    found = _REGISTERED.get(name)
    if found is not None:
        return found
    points = declared()
    if name not in points:
        known = ", ".join(sorted(points)) or "none"
        raise UnknownSource(f"no source named {name!r} is installed (installed: {known})")
    loaded = _load(points[name])
    if not isinstance(loaded, Source) or loaded.name != name:
        raise UnknownSource(f"entry point {points[name]!r} is not a source named {name!r}")
    return register(loaded)


def declared() -> dict[str, str]:
    """The sources installed packages declare: name to ``module:object``."""
    points = metadata.entry_points(group=ENTRY_POINTS)
    return {point.name: point.value for point in points}


def task_modules() -> list[str]:
    """What a worker imports at start besides the engine: task modules, then sources.

    Importing the sources early makes a broken one fail the worker's start, not its first
    delivery.
    """
    tasks = sorted(p.value for p in metadata.entry_points(group=TASK_MODULES))
    found = sorted(v.split(":", 1)[0] for v in declared().values())
    return [*tasks, *(m for m in found if m not in tasks)]


def _load(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    value: Any = import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value
