"""Scripts: what the scripted model answers, step by step.

A script is ``{"name", "match", "steps"}``. Step k answers the k-th model call of a
conversation and is either tool calls or a text::

    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}]}
    {"text": "It is {outputs} today."}

Several calls in one step are parallel calls. ``arguments`` is a JSON value, dumped, or a
string sent verbatim (so a script can make the model emit invalid JSON); ``id`` is optional
(derived otherwise). ``{outputs}`` in a text is replaced by the tool outputs the request
carried for the previous step's calls, in call order, joined by ``" | "``; a step without
``tool_calls`` and without ``text`` says :data:`DEFAULT_TEXT`. Past the last step the last
one answers again: a final text stays final, a final tool-call step loops forever (to test
a client's max-steps limit).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.wire import JSON

DEFAULT_TEXT = "Tool outputs: {outputs}"
#: The placeholder a text step's template may hold, and what joins the outputs in it.
OUTPUTS, OUTPUT_SEPARATOR = "{outputs}", " | "
BUILTIN_NAME = "builtin"
_STEP_KEYS = frozenset({"tool_calls", "text"})
_CALL_KEYS = frozenset({"name", "arguments", "id"})


@dataclass(frozen=True)
class ScriptedCall:
    """One tool call a step makes.

    Attributes:
        name: The function's name.
        arguments: The arguments as the model writes them: a JSON text, or not JSON at all.
        call_id: A fixed call id, or ``None`` to derive one per turn.
    """

    name: str
    arguments: str
    call_id: str | None = None


@dataclass(frozen=True)
class Step:
    """One model answer: tool calls (``calls``) or, when there are none, ``text``."""

    calls: tuple[ScriptedCall, ...] = ()
    text: str = DEFAULT_TEXT

    def render(self, outputs: Sequence[str]) -> str:
        """The text, ``{outputs}`` replaced (``str.replace``: other braces stay as written)."""
        return self.text.replace(OUTPUTS, OUTPUT_SEPARATOR.join(outputs))


@dataclass(frozen=True)
class Script:
    """A named list of steps, chosen by a text its conversation's first user message holds.

    Attributes:
        name: The script's name (recorded on every call it answers).
        match: The text that selects it, or ``None`` for the default script.
        steps: At least one step.
        spec: The steps as given, for the admin listing.
    """

    name: str
    match: str | None
    steps: tuple[Step, ...]
    spec: tuple[JSON, ...]

    def step(self, turn: int) -> tuple[int, Step]:
        """The step answering model turn ``turn`` and its index: the last one past the end."""
        index = min(turn, len(self.steps) - 1)
        return index, self.steps[index]

    def matches(self, text: str) -> bool:
        """Whether this (non-default) script answers a conversation opening with ``text``."""
        return self.match is not None and self.match in text

    def to_json(self) -> JSON:
        """The admin API's form: what was set."""
        return {"name": self.name, "match": self.match, "steps": copy.deepcopy(list(self.spec))}


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps({} if value is None else value)


def _call(spec: Any, where: str) -> ScriptedCall:
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be an object with 'name', 'arguments', 'id'")
    unknown = sorted(set(spec) - _CALL_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; known: {sorted(_CALL_KEYS)}")
    name, call_id = spec.get("name"), spec.get("id")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} needs a non-empty string 'name'")
    if call_id is not None and (not isinstance(call_id, str) or not call_id):
        raise ValueError(f"{where}: 'id' must be a non-empty string")
    return ScriptedCall(name, _arguments(spec.get("arguments")), call_id)


def _step(spec: Any, index: int) -> Step:
    where = f"steps[{index}]"
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be an object with 'tool_calls' or 'text'")
    unknown = sorted(set(spec) - _STEP_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; known: {sorted(_STEP_KEYS)}")
    if "tool_calls" in spec and "text" in spec:
        raise ValueError(f"{where} has both 'tool_calls' and 'text': a step is one or the other")
    if "tool_calls" in spec:
        calls = spec["tool_calls"]
        if not isinstance(calls, list) or not calls:
            raise ValueError(f"{where}.tool_calls must be a non-empty list of calls")
        parsed = tuple(_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls))
        fixed = [c.call_id for c in parsed if c.call_id is not None]
        if len(fixed) != len(set(fixed)):
            raise ValueError(f"{where}: two calls have the same 'id'")
        return Step(calls=parsed)
    text = spec.get("text", DEFAULT_TEXT)
    if not isinstance(text, str):
        raise ValueError(f"{where}.text must be a string")
    return Step(text=text)


def parse_script(name: Any, steps: Iterable[Any], match: Any = None) -> Script:
    """Validate a script; ``ValueError`` (a 400 from the admin routes) when malformed."""
    if not isinstance(name, str) or not name:
        raise ValueError("a script needs a non-empty string 'name'")
    if match is not None and (not isinstance(match, str) or not match):
        raise ValueError("'match' must be a non-empty string, or null for the default script")
    if isinstance(steps, (str, bytes, dict)):
        raise ValueError("'steps' must be a list of steps")
    specs = [copy.deepcopy(s) for s in steps]
    if not specs:
        raise ValueError("a script needs at least one step")
    parsed = tuple(_step(spec, i) for i, spec in enumerate(specs))
    return Script(name, match, parsed, tuple(specs))


#: The script answering when none is set: two parallel calls of the example tools
#: (``handlers.examples``: ``get_customer`` knows ids 123, 456, 789), then their outputs.
BUILTIN = parse_script(
    BUILTIN_NAME,
    [
        {
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_customer", "arguments": {"customer_id": "123"}},
            ]
        },
        {"text": DEFAULT_TEXT},
    ],
)
