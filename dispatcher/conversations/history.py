"""A conversation's messages (Chat) or items (Responses), rebuilt from its saved steps.

Nothing but the saved steps is kept: the history a model step sends is the first messages,
then, for each step, the model's answer and the answers to its tool calls, in call order.
So a step rebuilt after a crash sends the model exactly what the first attempt did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.conversations.store import Conversation
from dispatcher.sources.inline_calls import (
    Api,
    InlineCall,
    chat_calls,
    function_calls,
    function_outputs,
    tool_messages,
)
from dispatcher.sources.outputs import output_text
from tasks.runtime import get_limits


def calls_of(api: Api, answer: Mapping[str, Any]) -> list[InlineCall]:
    """The tool calls of one saved model answer (none: the model answered in text)."""
    if api is Api.CHAT:
        return chat_calls(answer["message"].get("tool_calls") or [], get_limits())
    return function_calls(answer.get("output") or [], get_limits())


def text_of(api: Api, answer: Mapping[str, Any]) -> str:
    """The text of one saved model answer."""
    if api is Api.CHAT:
        return str(answer["message"].get("content") or "")
    return str(answer.get("text") or "")


def answer_items(api: Api, answer: Mapping[str, Any]) -> list[Any]:
    """What one model answer adds to the history."""
    if api is Api.CHAT:
        return [dict(answer["message"])]
    return list(answer.get("output") or [])


def replies(
    api: Api, calls: list[InlineCall], results: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """What the answers to one step's tool calls add to the history."""
    if api is Api.CHAT:
        return tool_messages(calls, results)
    return function_outputs(calls, results)


def history(conversation: Conversation, upto: int | None = None) -> list[Any]:
    """The messages or items after ``upto`` steps (default: every saved one)."""
    api, items = conversation.spec.api, list(conversation.spec.messages)
    steps = conversation.answered_steps if upto is None else upto
    for step in range(steps):
        answer = conversation.answers[step]
        items += answer_items(api, answer)
        calls = calls_of(api, answer)
        if calls and step in conversation.results:
            items += replies(api, calls, conversation.results[step])
    return items


def steps(conversation: Conversation) -> list[dict[str, Any]]:
    """A trace of every saved step: its text, its tool calls and their outputs."""
    api, trace = conversation.spec.api, []
    for step in range(conversation.answered_steps):
        answer = conversation.answers[step]
        results = conversation.results.get(step, {})
        calls = [
            {
                "call_id": c.call_id,
                "name": c.name,
                "arguments": c.arguments,
                "output": output_text(results[c.call_id]) if c.call_id in results else None,
            }
            for c in calls_of(api, answer)
        ]
        trace.append(
            {
                "step": step,
                "model_calls": conversation.model_calls.get(step, 0),
                "text": text_of(api, answer),
                "tool_calls": calls,
            }
        )
    return trace
