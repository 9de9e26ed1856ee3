"""The scripted model: one request's turn in, one reply out, nothing remembered.

Each endpoint reduces its request to a :class:`Turn`: the conversation's first user text
(which picks the script and seeds the ids), how many model turns the request shows, and
the tool outputs it carries for the previous turn's calls. :func:`respond` turns that and
a script into a :class:`Reply`, which each endpoint renders in its own wire shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.chat.ids import derived_id
from emulator.chat.script import Script, ScriptedCall


@dataclass(frozen=True)
class Turn:
    """What the model sees of a request.

    Attributes:
        conversation: The text of the conversation's first user message ("" if none).
        index: Earlier model turns visible in the request: the step to answer.
        outputs: The outputs answering the previous turn's calls, in call order.
    """

    conversation: str
    index: int
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Call:
    """One tool call of a reply: the call id, the Responses item id, name and arguments."""

    call_id: str
    item_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """The model's answer to one turn.

    Attributes:
        script: The answering script's name.
        step: The index of the step that answered (the last one past the end).
        turn: The turn answered (``Turn.index``; above ``step`` in a looping script).
        calls: The tool calls, or none for a text reply.
        text: The text, or ``None`` for a tool-call reply.
        message_id: The Responses ``msg_...`` id of a text reply.
    """

    script: str
    step: int
    turn: int
    calls: tuple[Call, ...]
    text: str | None
    message_id: str


def _call(call: ScriptedCall, seed: tuple[str, str, int], index: int) -> Call:
    # The turn, not the step, seeds the id: a looping step asks for new calls each time.
    call_id = call.call_id or derived_id("call", *seed, index)
    return Call(call_id, derived_id("fc", *seed, index), call.name, call.arguments)


def respond(script: Script, turn: Turn) -> Reply:
    """The reply of ``script`` to ``turn``: the same turn always gets the same reply."""
    index, step = script.step(turn.index)
    seed = (script.name, turn.conversation, turn.index)
    message_id = derived_id("msg", *seed)
    if step.calls:
        calls = tuple(_call(call, seed, i) for i, call in enumerate(step.calls))
        return Reply(script.name, index, turn.index, calls, None, message_id)
    return Reply(script.name, index, turn.index, (), step.render(turn.outputs), message_id)
