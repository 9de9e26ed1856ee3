"""A Responses request: validated like the real API, reduced to the model's turn.

A request continues the conversation of its ``previous_response_id`` chain, summed up by a
:class:`Context`: the chain's first user text, its model turns, every function call made
and every call answered. The rules: an unknown previous response is refused; a
``function_call_output`` must answer a ``function_call`` of the input or of the chain; and
no function call of the whole conversation may be left unanswered when the model is
called again (the real API's "No tool output found for function call ...").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from emulator.chat.checks import (
    bad,
    invalid_type,
    missing,
    optional_bool,
    request_body,
)
from emulator.chat.items import Item, check_item
from emulator.chat.model import Turn
from emulator.chat.tools import check_response_tools
from emulator.wire import JSON

#: Request fields a response echoes as sent, with the value it shows when absent.
ECHOED: JSON = {
    "max_output_tokens": None,
    "metadata": {},
    "temperature": 1.0,
    "top_p": 1.0,
    "user": None,
}


@dataclass(frozen=True)
class Context:
    """A conversation so far, as a response passes it on to the request chained to it.

    Attributes:
        conversation: The text of its first user message, ``None`` while there is none.
        turns: The model turns it holds.
        calls: Every function call id made, in order.
        answered: Every call id a ``function_call_output`` answered.
        last_calls: The calls of its last model turn (none if that turn was a text).
    """

    conversation: str | None = None
    turns: int = 0
    calls: tuple[str, ...] = ()
    answered: frozenset[str] = frozenset()
    last_calls: tuple[str, ...] = ()

    def after(self, call_ids: Sequence[str]) -> Context:
        """The conversation once the model has answered one more turn with ``call_ids``."""
        return Context(
            self.conversation,
            self.turns + 1,
            self.calls + tuple(call_ids),
            self.answered,
            tuple(call_ids),
        )


@dataclass(frozen=True)
class ResponsesRequest:
    """A valid request: what the model sees and what its response must echo."""

    model: str
    turn: Turn
    context: Context
    previous_response_id: str | None
    instructions: str | None
    tools: list[JSON]
    tool_choice: Any
    parallel_tool_calls: bool
    store: bool
    echoed: JSON = field(default_factory=dict)


#: Finds the context a stored response passes on; ``None`` when there is no such response.
Lookup = Callable[[str], Context | None]


def _model(body: JSON) -> str:
    model = body.get("model")
    if model is None:
        raise missing("model")
    if not isinstance(model, str):
        raise invalid_type("model", "a string", model)
    return model


def _chain(body: JSON, lookup: Lookup) -> tuple[str | None, Context]:
    previous = body.get("previous_response_id")
    if previous is None:
        return None, Context()
    if not isinstance(previous, str):
        raise invalid_type("previous_response_id", "a string", previous)
    context = lookup(previous)
    if context is None:
        raise bad(
            f"Previous response with id '{previous}' not found.",
            "previous_response_id",
            "previous_response_not_found",
        )
    return previous, context


def _items(value: Any) -> list[Item]:
    if value is None:
        return []
    if isinstance(value, str):
        return [Item("message", "user", value)]
    if not isinstance(value, list):
        raise invalid_type("input", "one of a string or array of input items", value)
    return [check_item(item, i) for i, item in enumerate(value)]


def _turn_groups(items: Sequence[Item]) -> list[list[Item]]:
    """The model turns the input shows: runs of consecutive items the model wrote."""
    groups: list[list[Item]] = []
    previous_by_model = False
    for item in items:
        if item.by_model:
            if not previous_by_model:
                groups.append([])
            groups[-1].append(item)
        previous_by_model = item.by_model
    return groups


def _outputs(chain: Context, items: Sequence[Item]) -> dict[str, str]:
    """Each answered call's first output; refuses an output that answers no known call."""
    known = set(chain.calls) | {i.call_id for i in items if i.kind == "function_call"}
    outputs: dict[str, str] = {}
    for item in items:
        if item.kind != "function_call_output" or item.call_id is None:
            continue
        if item.call_id not in known:
            raise bad(
                f"No tool call found for function call output with call_id {item.call_id}.",
                "input",
            )
        outputs.setdefault(item.call_id, item.text)
    return outputs


def _follow(chain: Context, items: Sequence[Item]) -> tuple[Context, tuple[str, ...]]:
    """The context once the input is added, and the outputs of the previous turn's calls."""
    outputs = _outputs(chain, items)
    calls = chain.calls + tuple(str(i.call_id) for i in items if i.kind == "function_call")
    answered = chain.answered | frozenset(outputs)
    for call_id in calls:
        if call_id not in answered:
            raise bad(f"No tool output found for function call {call_id}.", "input")
    groups = _turn_groups(items)
    last_calls = (
        tuple(str(i.call_id) for i in groups[-1] if i.kind == "function_call")
        if groups
        else chain.last_calls
    )
    first_user = next((i.text for i in items if i.kind == "message" and i.role == "user"), None)
    conversation = chain.conversation if chain.conversation is not None else first_user
    context = Context(conversation, chain.turns + len(groups), calls, answered, last_calls)
    return context, tuple(outputs[c] for c in last_calls if c in outputs)


def _instructions(body: JSON) -> str | None:
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid_type("instructions", "a string", instructions)
    return instructions


def parse_responses(body: Any, lookup: Lookup) -> ResponsesRequest:
    """Validate a ``POST .../responses`` body; 400 ``WireError`` when the API would."""
    request = request_body(body)
    model = _model(request)
    previous_id, chain = _chain(request, lookup)
    context, outputs = _follow(chain, _items(request.get("input")))
    return ResponsesRequest(
        model=model,
        turn=Turn(context.conversation or "", context.turns, outputs),
        context=context,
        previous_response_id=previous_id,
        instructions=_instructions(request),
        tools=check_response_tools(request.get("tools")),
        tool_choice=request.get("tool_choice") or "auto",
        parallel_tool_calls=optional_bool(request, "parallel_tool_calls", True),
        store=optional_bool(request, "store", True),
        echoed={k: request[k] if request.get(k) is not None else v for k, v in ECHOED.items()},
    )
