"""Scripted phases: the function calls a run asks for, in the Assistants wire shape.

A phase is one ``requires_action`` step of a run: the calls the model made at once, all of
which one submit must answer. Calls are given as ``{"name", "arguments", "id"}``; the
``arguments`` travel as a JSON *string* (the model's text, possibly invalid JSON), so a JSON
value given here is dumped first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from emulator.wire import JSON, new_id

_CALL_KEYS = frozenset({"name", "arguments", "id"})


def tool_call(name: str, arguments: Any = None, *, call_id: str | None = None) -> JSON:
    """A required function tool call; ``arguments`` a JSON string, or a value to dump."""
    if not isinstance(arguments, str):
        arguments = json.dumps({} if arguments is None else arguments)
    return {
        "id": call_id or new_id("call"),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _call(spec: Any) -> JSON:
    if not isinstance(spec, Mapping):
        raise ValueError(f"a call must be an object with 'name', 'arguments', 'id': {spec!r}")
    unknown = sorted(set(spec) - _CALL_KEYS)
    if unknown:
        raise ValueError(f"unknown call keys {unknown}; known: {sorted(_CALL_KEYS)}")
    name, call_id = spec.get("name"), spec.get("id")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a call needs a non-empty string 'name': {spec!r}")
    if call_id is not None and (not isinstance(call_id, str) or not call_id):
        raise ValueError(f"a call's 'id' must be a non-empty string: {spec!r}")
    return tool_call(name, spec.get("arguments"), call_id=call_id)


def parse_phases(phases: Iterable[Iterable[Mapping[str, Any]]]) -> list[list[JSON]]:
    """Validate phases into wire calls; every phase non-empty, every call id unique in the run."""
    if isinstance(phases, (str, bytes, Mapping)):
        raise ValueError("'phases' must be a list of phases, each a list of calls")
    parsed: list[list[JSON]] = []
    seen: set[str] = set()
    for phase in phases:
        if isinstance(phase, (str, bytes, Mapping)):
            raise ValueError("each phase must be a list of calls")
        calls = [_call(spec) for spec in phase]
        if not calls:
            raise ValueError("each phase needs at least one call")
        for call in calls:
            if call["id"] in seen:
                raise ValueError(f"call id {call['id']!r} appears twice in the run")
            seen.add(call["id"])
        parsed.append(calls)
    return parsed


def function_tools(phases: Iterable[Iterable[JSON]]) -> list[JSON]:
    """One function tool definition per distinct function name called, in first-seen order."""
    names = dict.fromkeys(call["function"]["name"] for phase in phases for call in phase)
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name} (emulated)",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            },
        }
        for name in names
    ]
