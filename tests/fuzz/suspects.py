"""Naming the likely triggers of a counter's problems, from the kinds each call held.

One fatal kind in a session loses every call of it, so a lost call says little about
its own kinds. A kind is a likely trigger when (nearly) every call or session holding it
had the problem; picked greedily, so that kinds which merely shared sessions with a
trigger are not named as triggers themselves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tests.fuzz.plan import PlannedSession
from tests.fuzz.verify import Tally


def _only_in(units: Mapping[Any, Sequence[str]], hit: set[Any]) -> list[str]:
    """Labels (almost) only hit units hold: all of them (two at least) or nine in ten (of
    three at least), picked greedily: each next one is the label explaining the most hit
    units that the ones before did not, so a kind that merely shared sessions with a
    trigger is not listed as one."""
    holding: defaultdict[str, set[Any]] = defaultdict(set)
    for unit, labels in units.items():
        for label in labels:
            holding[label].add(unit)

    def qualifies(held: set[Any]) -> bool:
        share = len(held & hit) / len(held)
        return (share == 1 and len(held) > 1) or (share >= 0.9 and len(held) > 2)

    candidates = {label: held & hit for label, held in holding.items() if qualifies(held)}
    found: list[str] = []
    explained: set[Any] = set()
    while candidates:
        label = max(sorted(candidates), key=lambda lab: len(candidates[lab] - explained))
        fresh = candidates.pop(label) - explained
        if not fresh:
            break
        explained |= fresh
        found.append(f"{label} ({len(holding[label] & hit)}/{len(holding[label])})")
    left = len(hit & set(units)) - len(explained)
    return [*found, f"{left} not explained by these"] if found and left else found


def suspects(tally: Tally, plan: Sequence[PlannedSession], counter: str) -> dict[str, list[str]]:
    """The likely triggers of ``counter``'s problems: the kinds that every call (or every
    session) holding them had a problem in. Empty when nearly everything had one."""
    mine = [p for p in tally.problems if p.counter == counter]
    found: dict[str, list[str]] = {}
    hit_sessions = {
        p.session_id
        for p in mine
        if p.session_id is not None and (p.call is None or p.kind == "session got no batch")
    }
    if hit_sessions and len(hit_sessions) <= 0.9 * len(plan):
        by_session = {s.session_id: [lab for c in s.calls for lab in c.labels] for s in plan}
        found["sessions"] = _only_in(by_session, hit_sessions)
    hit_calls = {p.call for p in mine if p.call is not None and p.kind != "session got no batch"}
    if hit_calls:
        answered = {s.session_id for s in plan} - hit_sessions
        units: dict[Any, Sequence[str]] = {
            (s.session_id, *c.pair): c.labels
            for s in plan
            if s.session_id in answered
            for c in s.answerable
        }
        if len(hit_calls) <= 0.9 * len(units):
            found["calls"] = _only_in(units, hit_calls)
    return {k: v for k, v in found.items() if v}
