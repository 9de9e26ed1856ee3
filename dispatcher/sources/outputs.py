"""The one rule for answering a call with a string, shared by every string-shaped protocol.

Runs (``submit_tool_outputs``), Chat Completions (``role: "tool"`` messages) and Responses
(``function_call_output`` items) all take a call's answer as a string. A success is the
tool's output (a content array flattened to its text); a failure of any kind is the JSON
text ``{"error": "<message>"}``, which a model reads as plainly as a person does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def output_text(result: Mapping[str, Any]) -> str:
    """The output string of one result: its text, or a failure as ``{"error": ...}``."""
    if not result.get("success"):
        return json.dumps({"error": str(result.get("error") or "The function failed.")})
    output = result.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(_part_text(part) for part in output)
    return json.dumps(output)


def _part_text(part: Any) -> str:
    if isinstance(part, dict) and part.get("type") == "input_text":
        return str(part.get("text", ""))
    if isinstance(part, dict) and part.get("type") == "input_image":
        return "[image]"
    return json.dumps(part)
