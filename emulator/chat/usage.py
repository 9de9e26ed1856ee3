"""Token counts for ``usage``: a stable estimate, since no tokenizer runs here.

Clients log and sum usage, and the SDK's models require it, so every answer carries one.
About four characters make a token in English text; the estimate is that, of the request
or reply as JSON, and never zero (a real call always costs something).
"""

from __future__ import annotations

import json
import math
from typing import Any

_CHARS_PER_TOKEN = 4


def estimate_tokens(value: Any) -> int:
    """The tokens ``value`` (a text, or any JSON value) would roughly take."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=True, default=str)
    return max(1, math.ceil(len(text) / _CHARS_PER_TOKEN))
