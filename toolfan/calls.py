"""The fleet as a function call, for applications that drive the model themselves.

An application that calls Chat Completions or Responses holds the model's tool calls in
its own hands: there is no hosted session for a poller to find. These functions run every
call of one model answer on the fleet at once (one task per call, on its function's
queue) and return the answers the next model call needs, in the order given::

    message = completion.choices[0].message
    if message.tool_calls:
        messages.append(message)
        messages += toolfan.run_tool_calls(message.tool_calls, conversation_id=chat_id)

Exactly once: a batch is named by the conversation and its sorted call ids, so an
application that crashes and repeats the call gets the saved answers, and no function
runs twice. The process needs the same ``TOOLFAN_REDIS_URL``, broker and
``TOOLFAN_HANDLERS`` as the workers (the handlers say which queue each function is on).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from dispatcher.sources.inline_calls import (
    Api,
    InlineCall,
    chat_calls,
    function_calls,
    function_outputs,
    tool_messages,
)
from dispatcher.sources.inline_run import InlineBatch, InlineRunner, check_timeout
from tasks.runtime import get_limits

__all__ = ["arun_function_calls", "arun_tool_calls", "run_function_calls", "run_tool_calls"]

DEFAULT_TIMEOUT = 60.0


def run_tool_calls(
    tool_calls: Iterable[Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    conversation_id: str | None = None,
    allowed: Collection[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run a Chat Completions message's tool calls on the fleet; its ``tool`` messages.

    Args:
        tool_calls: ``message.tool_calls``, as the SDK returns them or as dicts.
        timeout: Seconds to wait; calls unfinished by then are answered with a timeout
            error, and that answer is what a repeat gets.
        conversation_id: Names the conversation, so that call ids the model reuses in
            another conversation make another batch.
        allowed: The functions the calls may name (default: every registered one); any
            other is answered with an error and never runs.
        metadata: Whom the calls serve (``{"user_id": ...}``): the tools read it as
            ``CallContext.metadata``, never from the model. String pairs, bounded as the
            APIs bound metadata (16 pairs of a 64-character key and a 512-character value).

    Returns:
        ``{"role": "tool", "tool_call_id", "content"}`` per call, in the order given. A
        failure of any kind is the content ``{"error": "<message>"}``.

    Raises:
        ValueError: a call has no id, or ``timeout`` is not a positive number.
    """
    calls = chat_calls(tool_calls, get_limits())
    batch = _batch(Api.CHAT, calls, conversation_id, metadata)
    results = _runner().run(batch, check_timeout(timeout), allowed=allowed)
    return tool_messages(calls, results)


async def arun_tool_calls(
    tool_calls: Iterable[Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    conversation_id: str | None = None,
    allowed: Collection[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """:func:`run_tool_calls` for asyncio: waiting holds no thread."""
    calls = chat_calls(tool_calls, get_limits())
    batch = _batch(Api.CHAT, calls, conversation_id, metadata)
    results = await _runner().arun(batch, check_timeout(timeout), allowed=allowed)
    return tool_messages(calls, results)


def run_function_calls(
    items: Iterable[Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    conversation_id: str | None = None,
    allowed: Collection[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run a Responses answer's ``function_call`` items on the fleet; their outputs.

    Args:
        items: ``response.output``, as the SDK returns it or as dicts; items other than
            ``function_call`` are left out.
        timeout: As for :func:`run_tool_calls`.
        conversation_id: As for :func:`run_tool_calls`.
        allowed: As for :func:`run_tool_calls`.
        metadata: As for :func:`run_tool_calls`.

    Returns:
        ``{"type": "function_call_output", "call_id", "output"}`` per call, in order.

    Raises:
        ValueError: a call has no ``call_id``, or ``timeout`` is not a positive number.
    """
    calls = function_calls(items, get_limits())
    batch = _batch(Api.RESPONSES, calls, conversation_id, metadata)
    results = _runner().run(batch, check_timeout(timeout), allowed=allowed)
    return function_outputs(calls, results)


async def arun_function_calls(
    items: Iterable[Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    conversation_id: str | None = None,
    allowed: Collection[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """:func:`run_function_calls` for asyncio: waiting holds no thread."""
    calls = function_calls(items, get_limits())
    batch = _batch(Api.RESPONSES, calls, conversation_id, metadata)
    results = await _runner().arun(batch, check_timeout(timeout), allowed=allowed)
    return function_outputs(calls, results)


def _batch(
    api: Api,
    calls: list[InlineCall],
    conversation_id: str | None,
    metadata: Mapping[str, str] | None,
) -> InlineBatch:
    if conversation_id is not None and not isinstance(conversation_id, str):
        raise TypeError(f"conversation_id must be a string, not {type(conversation_id).__name__}")
    if metadata is not None and not (
        isinstance(metadata, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise TypeError("metadata must map strings to strings")
    return InlineBatch.of(api, calls, conversation_id, metadata)


def _runner() -> InlineRunner:
    return InlineRunner()
