"""The fuzz tools; the worker loads them through ``TOOLFAN_HANDLERS=tests.fuzz.tools``.

Both tools take the call's own ``token`` and an output ``kind``, and build that output:
hostile in shape or size, but always led by the token (string outputs start with it, JSON
outputs have it as their first key or item, content arrays in their first text part,
error messages carry it where they have any text). A tool never sees another call's
token, so a result carrying a foreign token, or a success lacking its own, was mixed up
by toolfan.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from handlers import ToolError, tool
from tests.fuzz.kinds import (
    ASYNC_TOOL,
    DEEP_RETURN,
    HUGE_IMAGE,
    HUGE_MESSAGE,
    HUGE_TEXT,
    MANY_PARTS,
    SYNC_TOOL,
    TOOL_TIMEOUT,
)


class _Opaque:
    """A return value no serializer knows."""

    def __init__(self, token: str) -> None:
        self.token = token


def _deep(token: str, depth: int) -> list[Any]:
    """``[token, [[[...]]]]`` nested ``depth`` deep, built in a loop (no recursion here)."""
    inner: list[Any] = []
    for _ in range(depth):
        inner = [inner]
    return [token, inner]


def _content(token: str, kind: str) -> list[dict[str, str]]:
    text = {"type": "input_text", "text": f"{token} content"}
    image = {"type": "input_image", "image_url": f"https://example.invalid/{token}.png"}
    if kind == "content_empty_text":
        return [text, {"type": "input_text", "text": ""}, image]
    if kind == "content_empty_image":
        return [text, {"type": "input_image", "image_url": ""}]
    if kind == "content_huge_image":
        return [
            text,
            {"type": "input_image", "image_url": "data:image/png;base64," + "A" * HUGE_IMAGE},
        ]
    if kind == "content_many_parts":
        rest = [{"type": "input_text", "text": f"part {i}"} for i in range(MANY_PARTS - 1)]
        return [text, *rest]
    return [text, image]


def _fail(token: str, kind: str) -> None:
    """Raise the failure ``kind`` asks for (the tool-error and exception kinds)."""
    if kind == "tool_error":
        raise ToolError(f"{token} refused on purpose")
    if kind == "tool_error_empty":
        raise ToolError("")
    if kind == "tool_error_huge":
        raise ToolError(token + "E" * HUGE_MESSAGE)
    if kind == "tool_error_surrogate":
        raise ToolError(f"{token} lone \ud800 surrogates \udfff here")
    if kind == "exception_huge":
        raise RuntimeError(token + "X" * HUGE_MESSAGE)
    raise ToolError(f"{token} unknown kind {kind[:100]!r}")


def build(token: str, kind: str) -> Any:
    """The output of ``kind`` for the call ``token`` (or the failure it raises)."""
    simple: dict[str, Any] = {
        "text": f"{token} plain",
        "text_nul": f"{token} nul \x00 inside \x00",
        "text_nul_surrogate": f"{token} nul \x00 lone \ud800 and \udfff",
        "text_huge": token + "h" * HUGE_TEXT,
        "json_dict": {token: True, "n": 1, "s": "é😀", "list": [1, 2.5, None]},
        "json_list": [token, 1, "two", {"three": 3}],
        "json_set": {token},
        "unserializable_object": _Opaque(token),
    }
    if kind in simple:
        return simple[kind]
    if kind == "json_nested":
        return {token: _deep(token, 50)}
    if kind == "deep_return":
        return _deep(token, DEEP_RETURN)
    if kind.startswith("content"):
        return _content(token, kind)
    _fail(token, kind)


@tool(name=SYNC_TOOL, timeout=TOOL_TIMEOUT)
def fuzz_echo(token: str, kind: str, pad: str = "", ms: int = 0) -> Any:
    """Build the output ``kind`` asks for, led by ``token``; ``pad`` is ignored ballast."""
    if kind == "sleep":
        time.sleep(min(ms, 1000) / 1000)
        return f"{token} slept {ms} ms"
    return build(token, kind)


@tool(name=ASYNC_TOOL, timeout=TOOL_TIMEOUT)
async def fuzz_async(token: str, kind: str, pad: str = "", ms: int = 0) -> Any:
    """The same as ``fuzz_echo``, as a coroutine (toolfan runs it on an event loop)."""
    if kind == "sleep":
        await asyncio.sleep(min(ms, 1000) / 1000)
        return f"{token} slept {ms} ms"
    return build(token, kind)
