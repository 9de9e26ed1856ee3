"""What a conversation is asked to do, fixed when it starts."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dispatcher.sources.inline_calls import Api

#: Model steps a conversation may take unless it says otherwise.
DEFAULT_MAX_STEPS = 8
#: Seconds one step's tool calls may take before unfinished ones are answered with errors.
DEFAULT_TOOL_TIMEOUT = 60.0


class ConversationError(ValueError):
    """A conversation cannot start as asked (the message says what to change)."""


@dataclass(frozen=True)
class Spec:
    """A conversation's fixed inputs.

    Attributes:
        api: ``chat`` (Chat Completions) or ``responses``.
        model: The model (an Azure deployment name there).
        messages: The first messages (Chat) or input items (Responses).
        instructions: A system message (Chat) or the ``instructions`` (Responses).
        max_steps: Model calls at most.
        tool_timeout: Seconds one step's tool calls may take.
        created_at: Epoch seconds.
    """

    api: Api
    model: str
    messages: list[Any]
    instructions: str | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    created_at: float = field(default_factory=time.time)

    def to_json(self) -> str:
        """The spec as stored."""
        return json.dumps({**asdict(self), "api": self.api.value})

    @classmethod
    def from_json(cls, raw: str) -> Spec:
        """A stored spec."""
        value = json.loads(raw)
        return cls(**{**value, "api": Api(value["api"])})


def new_id() -> str:
    """A fresh conversation id."""
    return f"conv_{uuid.uuid4().hex}"


def make_spec(
    api: str,
    model: str,
    messages: Sequence[Any] | None,
    input: str | Sequence[Any] | None,  # the Responses API's own name
    instructions: str | None,
    max_steps: int,
    tool_timeout: float,
) -> Spec:
    """A checked spec.

    Raises:
        ConversationError: an argument cannot work (named in the message).
    """
    try:
        kind = Api(api)
    except ValueError:
        raise ConversationError(f"api must be 'chat' or 'responses', not {api!r}") from None
    if not isinstance(model, str) or not model:
        raise ConversationError("model must be a non-empty string")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ConversationError(f"max_steps must be a positive integer, not {max_steps!r}")
    if not isinstance(tool_timeout, int | float) or not 0 < tool_timeout < 86_400:
        raise ConversationError(
            f"timeout must be between 0 and 86400 seconds, not {tool_timeout!r}"
        )
    first = _first_messages(messages, input)
    json.dumps(first)  # only JSON travels; a TypeError here names the bad value
    return Spec(kind, model, first, instructions, max_steps, float(tool_timeout))


def _first_messages(messages: Sequence[Any] | None, input: str | Sequence[Any] | None) -> list[Any]:
    if messages is not None and input is not None:
        raise ConversationError("give messages or input, not both")
    given = messages if messages is not None else input
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    if given is None or isinstance(given, bytes | dict) or not list(given):
        raise ConversationError("a conversation needs messages (or input): a prompt or a list")
    return [_plain(m) for m in given]


def _plain(message: Any) -> Any:
    """SDK objects as the dicts the API takes back."""
    dump = getattr(message, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else message
