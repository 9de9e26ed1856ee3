"""The bytes of deliveries the intake holds at once, every connection together.

A delivery's signature covers its body, so the intake must hold the whole body before it
can tell a delivery from a forgery. Each body is bounded (``TOOLFAN_WEBHOOK_MAX_BYTES``)
and so is the time it may take to arrive (:mod:`dispatcher.webhook.deadline`), but not
how many arrive at once: a client sending large bodies on many connections made the intake
hold their sum, as much memory as it had bandwidth to fill. A :class:`Budget` bounds that
sum. A chunk that would take it over is refused, and its request answered ``503``: the
platform delivers again later, and polling is the safety net meanwhile. The platform's own
deliveries are a few hundred bytes each, so the default (64 MiB) is reached only by bodies
nobody signed.

Bytes are counted as they arrive, never as a request announces them: a budget taken on a
``Content-Length`` alone would let a client that sends nothing shut the intake for
everyone. A request's bytes are given back as soon as it is answered or fails.

The intake's event loop is one thread, so the count needs no lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class OverBudget(Exception):
    """Taking a chunk would put the intake over its budget."""


class Budget:
    """At most ``total`` bytes held at once, by every :class:`Hold` together."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    @contextmanager
    def hold(self) -> Iterator[Hold]:
        """The bytes of one request, given back when the block ends, however it ends."""
        hold = Hold(self)
        try:
            yield hold
        finally:
            self.held -= hold.size


class Hold:
    """What one request holds of a :class:`Budget`."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self.size = 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes of this request.

        Raises:
            OverBudget: the budget has no room for them (nothing is counted).
        """
        budget = self._budget
        if budget.held + size > budget.total:
            raise OverBudget
        budget.held += size
        self.size += size
