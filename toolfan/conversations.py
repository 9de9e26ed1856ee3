"""The durable tool loop on the fleet: start a conversation, and read how it ended.

::

    cid = toolfan.start_conversation(model="gpt-4.1-mini", input="What is the weather in Paris?")
    result = toolfan.conversation_result(cid, timeout=120)
    print(result.status, result.text)

Each model step is a task on ``toolfan.model``, each step's tool calls one chord on their
functions' queues; every model answer and tool result is saved before the next step, so a
crash anywhere resumes from the last saved step, and no model call or function call runs
twice. The model is called with the official ``openai`` SDK, configured by the variables
toolfan already reads (``OPENAI_*``, ``AZURE_OPENAI_*``, ``AZURE_AI_PROJECT_ENDPOINT``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatcher.conversations.history import history, steps
from dispatcher.conversations.spec import (
    DEFAULT_MAX_STEPS,
    DEFAULT_TOOL_TIMEOUT,
    ConversationError,
    make_spec,
    new_id,
)
from dispatcher.conversations.step import advance, get_store
from dispatcher.conversations.store import RUNNING
from tasks.runtime import get_settings

__all__ = ["ConversationError", "ConversationResult", "conversation_result", "start_conversation"]


@dataclass(frozen=True)
class ConversationResult:
    """Where a conversation stands.

    Attributes:
        conversation_id: Its id.
        status: ``running``, ``completed``, ``max_steps``, or ``failed``.
        text: The final answer's text (empty unless ``completed``).
        reason: Why it stopped, for ``failed`` and ``max_steps``.
        messages: The whole history: Chat messages, or Responses input items.
        steps: One entry per model step: its text, its tool calls and their outputs.
        api: ``chat`` or ``responses``.
        model: The model it calls.
    """

    conversation_id: str
    status: str
    text: str
    reason: str
    messages: list[Any] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    api: str = ""
    model: str = ""

    @property
    def done(self) -> bool:
        """Whether it has ended."""
        return self.status != RUNNING


def start_conversation(
    *,
    api: str = "chat",
    model: str | None = None,
    messages: Sequence[Any] | None = None,
    input: str | Sequence[Any] | None = None,  # the Responses API's own name
    instructions: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    conversation_id: str | None = None,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
) -> str:
    """Start a tool loop on the fleet; returns its conversation id at once.

    Args:
        api: ``chat`` (Chat Completions) or ``responses``.
        model: The model (default ``TOOLFAN_MODEL``).
        messages: The first messages (or input items); or give ``input``.
        input: A prompt, or input items.
        instructions: A system message (Chat) or the ``instructions`` (Responses).
        max_steps: Model calls at most; a loop still asking for tools then stops.
        conversation_id: Names it; starting an existing id again changes nothing and
            returns it, so an application may repeat the call after a crash.
        timeout: Seconds one step's tool calls may take.

    Raises:
        ConversationError: an argument cannot work (the message says which).
    """
    spec = make_spec(
        api, model or get_settings().model, messages, input, instructions, max_steps, timeout
    )
    if conversation_id is not None and (
        not isinstance(conversation_id, str) or not conversation_id
    ):
        raise ConversationError("conversation_id must be a non-empty string")
    cid = conversation_id or new_id()
    get_store().start(cid, spec)
    advance.apply_async((cid,), ignore_result=True)
    return cid


def conversation_result(conversation_id: str, timeout: float = 60.0) -> ConversationResult:
    """How the conversation stands, after waiting up to ``timeout`` seconds for its end.

    One that has ended returns at once; one still running after ``timeout`` is returned
    with status ``running`` (``timeout=0`` only looks).

    Raises:
        LookupError: no conversation has this id (or it expired).
    """
    if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds, not {timeout!r}")
    store = get_store()
    if store.load(conversation_id) is None:
        raise LookupError(f"no conversation {conversation_id[:200]!r}")
    deadline = time.monotonic() + timeout
    store.wait_end(conversation_id, deadline - time.monotonic())
    conversation = store.load(conversation_id)
    if conversation is None:
        raise LookupError(f"no conversation {conversation_id[:200]!r}")
    return ConversationResult(
        conversation_id,
        conversation.status,
        conversation.text,
        conversation.reason,
        history(conversation),
        steps(conversation),
        conversation.spec.api.value,
        conversation.spec.model,
    )
