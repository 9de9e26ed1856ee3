r"""Making untrusted text safe to store, send and log: no lone surrogates, bounded length.

Tool outputs and error messages carry text from tools, exceptions and the model. Python
strings may hold lone UTF-16 surrogates (JSON's ``"\\ud800"`` decodes to one), which no
UTF-8 encoder accepts: such a string fails when it is saved or sent, far from where it came
from. Text meant for the model is therefore scrubbed once, where a result is made, and cut
to a length the model and the API can use, with a marker that says what was cut.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_PLAIN = re.compile(r"[A-Za-z0-9_.:/@+\-]{1,200}")


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD; paired ones are joined.

    Cheap for the common case: ASCII text, or text UTF-8 accepts, is returned as is.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def clip(text: str, limit: int, what: str = "characters") -> str:
    """``text`` cut to at most ``limit`` characters, ending in a marker when it was cut."""
    if len(text) <= limit:
        return text
    marker = f" [cut: {len(text):,} {what}, showing the first {{kept:,}}]"
    kept = max(0, limit - len(marker.format(kept=limit)))
    return text[:kept] + marker.format(kept=kept)


def shown(value: object) -> str:
    """A value for a log line: plain tokens as they are, anything else quoted and cut.

    Ids may hold newlines, ``=`` or 10,000 characters; quoted, escaped and cut they can
    neither forge a line nor a field, nor flood the log.
    """
    text = value if isinstance(value, str) else str(value)
    if _PLAIN.fullmatch(text):
        return text
    return repr(text if len(text) <= 200 else f"{text[:200]}...")
