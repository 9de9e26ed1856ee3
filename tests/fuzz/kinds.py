"""Names shared by the fuzz tools (in the worker) and the runner: tokens, kinds, sizes.

Kept apart from ``tools.py`` so the runner and the test can read them without registering
the fuzz tools in their own process (under pytest, that registry is the rest of the suite's).
"""

from __future__ import annotations

import random
import re

#: Every call gets its own token; an answer carrying another call's token is cross-talk.
TOKEN_RE = re.compile(r"fz-[0-9a-f]{20}")
#: The fuzz tools: one plain function and one coroutine, built alike.
SYNC_TOOL = "fuzz_echo"
ASYNC_TOOL = "fuzz_async"
TOOLS = (SYNC_TOOL, ASYNC_TOOL)
#: Seconds the fuzz tools may run; their sleeps stay far below it.
TOOL_TIMEOUT = 20.0
#: Seconds toolfan allows a call to an unregistered function (``UNKNOWN_TOOL_TIMEOUT``).
UNKNOWN_TIMEOUT = 10.0
#: toolfan's defaults (the run sets none of them): hard-limit grace and queueing budget.
DEFAULT_GRACE = 30.0
DEFAULT_QUEUE_BUDGET = 300.0
#: toolfan's default output cut, in characters.
DEFAULT_MAX_OUTPUT_CHARS = 100_000

MB = 1_000_000
HUGE_TEXT = 3 * MB
HUGE_MESSAGE = 5 * MB
HUGE_IMAGE = 5 * MB
MANY_PARTS = 20_000
DEEP_RETURN = 5_000

#: What the tool builds, by the ``kind`` argument. Values: relative weight in a run, and
#: whether it is big (its count per run is capped, so memory stays bounded).
OUTPUT_KINDS: dict[str, tuple[float, bool]] = {
    "text": (30, False),
    "text_nul": (3, False),
    "text_nul_surrogate": (2, False),
    "text_huge": (1, True),
    "json_dict": (8, False),
    "json_list": (5, False),
    "json_nested": (2, False),
    "json_set": (1, False),
    "content": (5, False),
    "content_empty_text": (1, False),
    "content_empty_image": (1, False),
    "content_huge_image": (0.5, True),
    "content_many_parts": (0.5, True),
    "tool_error": (3, False),
    "tool_error_empty": (1, False),
    "tool_error_huge": (0.5, True),
    "tool_error_surrogate": (1, False),
    "exception_huge": (0.5, True),
    "unserializable_object": (1, False),
    "deep_return": (1, False),
    "sleep": (3, False),
    "no_such_kind": (1, False),
}
#: Kinds whose calls must succeed (with their token leading the output): the tool builds
#: a plain value, so any error but a timeout or a crash means the answer is another's.
MUST_SUCCEED = frozenset(
    {"text", "text_nul", "json_dict", "json_list", "json_nested", "content", "sleep"}
)


def new_token(rng: random.Random) -> str:
    """A fresh token: recognisable by :data:`TOKEN_RE`, unique in practice."""
    return f"fz-{rng.getrandbits(80):020x}"


def leads_with(text: str, token: str) -> bool:
    """Whether ``token`` opens ``text`` (a string, or JSON whose first key or item it is)."""
    return token in text[: len(token) + 4]
