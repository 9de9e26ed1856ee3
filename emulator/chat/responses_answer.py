"""The ``response`` object of a reply, every field the SDK requires present.

Field names and shapes follow ``openai/types/responses/response.py`` (3.51.0). A reply
with tool calls outputs one ``function_call`` item per call (``fc_...`` item id,
``call_...`` call id, arguments a string); a text reply outputs one assistant ``message``
with one ``output_text`` part, which is what the SDK's ``response.output_text`` joins.
"""

from __future__ import annotations

import copy

from emulator.chat.model import Call, Reply
from emulator.chat.responses_request import ResponsesRequest
from emulator.chat.usage import estimate_tokens
from emulator.wire import JSON


def _function_call(call: Call) -> JSON:
    return {
        "type": "function_call",
        "id": call.item_id,
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    }


def _message(reply: Reply) -> JSON:
    return {
        "type": "message",
        "id": reply.message_id,
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": reply.text or "", "annotations": [], "logprobs": []}
        ],
    }


def _usage(request_body: JSON, output: list[JSON]) -> JSON:
    prompt = estimate_tokens([request_body.get("instructions"), request_body.get("input")])
    completion = estimate_tokens(output)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def response_object(
    reply: Reply,
    request: ResponsesRequest,
    *,
    response_id: str,
    created: int,
    request_body: JSON,
) -> JSON:
    """The answer to a create-response request, as ``Response`` parses it."""
    output = [_function_call(c) for c in reply.calls] if reply.calls else [_message(reply)]
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "completed_at": created,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": request.store,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": copy.deepcopy(request.tool_choice),
        "tools": copy.deepcopy(request.tools),
        "truncation": "disabled",
        "usage": _usage(request_body, output),
        **copy.deepcopy(request.echoed),
    }
