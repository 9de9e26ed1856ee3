"""The ``chat.completion`` object of a reply, every field the SDK requires present.

Field names and shapes follow ``openai/types/chat/chat_completion.py`` (3.51.0): one
choice, whose message is the assistant's with ``content`` (``None`` when it calls tools),
``refusal: null`` and, for tool calls, ``tool_calls`` with the arguments as a string;
``finish_reason`` ``tool_calls`` or ``stop``.
"""

from __future__ import annotations

from emulator.chat.model import Reply
from emulator.chat.usage import estimate_tokens
from emulator.wire import JSON


def _tool_call(call_id: str, name: str, arguments: str) -> JSON:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _message(reply: Reply) -> JSON:
    message: JSON = {
        "role": "assistant",
        "content": reply.text,
        "refusal": None,
        "annotations": [],
    }
    if reply.calls:
        message["tool_calls"] = [_tool_call(c.call_id, c.name, c.arguments) for c in reply.calls]
    return message


def _usage(request_body: JSON, message: JSON) -> JSON:
    prompt, completion = estimate_tokens(request_body.get("messages")), estimate_tokens(message)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_completion(
    reply: Reply, *, completion_id: str, model: str, created: int, request_body: JSON
) -> JSON:
    """The answer to a chat completion request, as ``ChatCompletion`` parses it."""
    message = _message(reply)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(request_body, message),
        "service_tier": "default",
        "system_fingerprint": "fp_emulator",
    }
