"""Ids derived from what they name, so the same request always gets the same ids.

A real model's ids are random; the scripted model's are hashes of the script, the
conversation, the turn and the call's position. A repeated model call therefore answers
with the very ids it answered before, and a test can only notice the repeat by counting
calls (``ChatState.count``), exactly the blind spot a client's loop must not rely on.
"""

from __future__ import annotations

import hashlib
import json

#: Hex digits of the digest kept in an id: long enough never to collide in a test run.
_DIGITS = 24


def derived_id(prefix: str, *parts: object, separator: str = "_") -> str:
    """``<prefix><separator><hex>``, the hex a digest of ``parts`` (any JSON values).

    The digest is over ASCII JSON (``ensure_ascii``, sorted keys), so parts holding lone
    surrogates or key orders that differ still hash, and hash the same every time.
    """
    text = json.dumps(parts, ensure_ascii=True, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()[:_DIGITS]
    return f"{prefix}{separator}{digest}"
