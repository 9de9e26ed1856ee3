"""The API's misbehaviour over a run, decided up front from a seed: fault phases.

Faults go on the events endpoint only (500s, 429s with ``Retry-After``, latency, lost
202s), never on listing: a failed poll pass then is never an injected fault, so it counts
as a crash without ambiguity. The first phase holds every kind of fault at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FaultPhase:
    """From ``at`` seconds into the run, these emulator fault knobs (None: no faults)."""

    at: float
    knobs: dict[str, Any] | None


def fault_knobs(rng: random.Random, every_kind: bool = False) -> dict[str, Any]:
    """One phase of API misbehaviour on the events endpoint (listing stays clean, so a
    failed poll is never an injected fault)."""
    pick = (lambda xs: xs[-1]) if every_kind else rng.choice
    return {
        "error_rate": pick([0.05, 0.1, 0.15]),
        "throttle_rate": pick([0.0, 0.05, 0.1]),
        "retry_after": rng.choice([0.2, 0.5]),
        "lost_202_rate": pick([0.0, 0.05, 0.1]),
        "latency": pick([0.0, 0.0, 0.02, 0.05]),
        "endpoints": ["events"],
        "seed": rng.randrange(2**31),
    }


def plan_faults(rng: random.Random, window: float) -> list[FaultPhase]:
    """Fault phases over ``window`` seconds, the first with every kind of fault, and no
    faults after the window."""
    phases: list[FaultPhase] = []
    t = rng.uniform(0.2, 1.0)
    while t < window:
        length = rng.uniform(1.5, 4.0)
        phases.append(FaultPhase(t, fault_knobs(rng, every_kind=not phases)))
        phases.append(FaultPhase(min(window, t + length), None))
        t += length + rng.uniform(0.5, 2.0)
    return phases


def describe_phases(phases: list[FaultPhase]) -> str:
    """The fault phases in a few words, for the informational line."""
    on = [p.knobs for p in phases if p.knobs]
    latency = max((float(k["latency"]) for k in on), default=0.0)
    return f"{len(on)} phases on the events endpoint (latency up to {latency:g} s)"
