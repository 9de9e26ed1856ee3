"""Command-line argument types that refuse what argparse's ``float`` lets through.

``float`` parses ``nan``, ``inf`` and negative numbers. A poll interval of ``nan`` or
``-1`` made the loop wait zero seconds between passes (``max(0.0, nan)`` is ``0.0``),
listing the API as fast as it answers; ``inf`` crashed the loop after its first pass
(``OverflowError`` from the wait). Refused at the command line, each names the option.
"""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """A finite, positive number of seconds.

    Raises:
        argparse.ArgumentTypeError: for anything else (argparse names the option).
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text[:40]!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535.

    ``int`` let ``--port -1`` and ``--port 99999`` through to ``bind()``, whose
    ``OverflowError`` ended the command in a traceback.

    Raises:
        argparse.ArgumentTypeError: for anything else (argparse names the option).
    """
    if not (text.isascii() and text.isdigit() and int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"not a port number (0 to 65535): {text[:40]!r}")
    return int(text)


#: The most of anything a command makes on its own (the demo's sessions and runs).
MAX_COUNT = 100_000


def count(text: str) -> int:
    """A number of things to make: 0 to :data:`MAX_COUNT`.

    ``int`` let negative numbers through: ``demo --sessions -5`` printed "seeded -5
    sessions", and ``demo --runs -3`` ran everything well, then reported a failure (no
    count of completed runs equals -3).

    Raises:
        argparse.ArgumentTypeError: for anything else (argparse names the option).
    """
    if not (text.isascii() and text.isdigit() and int(text) <= MAX_COUNT):
        raise argparse.ArgumentTypeError(f"not a count (0 to {MAX_COUNT}): {text[:40]!r}")
    return int(text)
