"""How much toolfan accepts from the model and from tools, as one small value object.

Arguments come from the model and outputs from tool code; neither is trusted to be small.
Each bound here turns "too much" into a clear failed result for that one call, instead of a
crash, a refused batch or a five-megabyte log line. The worker fills one from the
``TOOLFAN_MAX_*`` settings (see the README's "Limits" table); the defaults are the same.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Bounds on one call's arguments and on one result.

    Attributes:
        argument_bytes: Arguments larger than this (as JSON) are refused unparsed.
        depth: Arguments, and values a tool returns, nested deeper than this are refused.
        error_chars: Error messages for the model are cut to this many characters.
        image_url_chars: An ``input_image`` part's URL longer than this fails the call.
        content_parts: A content array with more parts than this fails the call.
        content_bytes: A content array larger than this (all parts, as JSON) fails the call.
    """

    argument_bytes: int = 1_048_576
    depth: int = 64
    error_chars: int = 4_000
    image_url_chars: int = 2_000_000
    content_parts: int = 100
    content_bytes: int = 4_194_304


DEFAULT_LIMITS = Limits()
