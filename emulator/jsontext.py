r"""JSON text the emulator sends: always ASCII, and able to carry verbatim raw fragments.

Two needs meet here. Hostile ids may hold lone UTF-16 surrogates, which UTF-8 cannot encode,
so every body is rendered with ``ensure_ascii=True`` (a surrogate travels as a ``\ud800``
escape, exactly as a client may have sent it). And tests need answers that Python's own
``json.dumps`` cannot produce (a 5,000-digit number, arguments nested 5,000 deep), so a
:class:`RawJson` value is spliced into the rendered text verbatim. A raw text must be one
complete JSON value, checked without recursion, so it can never spill out of its own field.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

_TOKEN = re.compile(
    r"""(?P<ws>[ \t\n\r]+)
    |(?P<string>"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")
    |(?P<scalar>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null)
    |(?P<punct>[{}\[\]:,])""",
    re.VERBOSE,
)
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _COMMA_OR_CLOSE, _END = range(7)
_OPENS = {"{": _KEY_OR_CLOSE, "[": _VALUE_OR_CLOSE}
_CLOSES = {"}": ("{", _KEY_OR_CLOSE), "]": ("[", _VALUE_OR_CLOSE)}
_ATTEMPTS = 3


def _after_value(stack: list[str]) -> int:
    return _COMMA_OR_CLOSE if stack else _END


def _step(state: int, symbol: str, stack: list[str]) -> int | None:
    """The state after ``symbol`` (``string``, ``scalar`` or a punctuation mark), or ``None``."""
    if state in (_VALUE, _VALUE_OR_CLOSE):
        if symbol in ("string", "scalar"):
            return _after_value(stack)
        if symbol in _OPENS:
            stack.append(symbol)
            return _OPENS[symbol]
    if state in (_KEY, _KEY_OR_CLOSE) and symbol == "string":
        return _COLON
    if state == _COLON and symbol == ":":
        return _VALUE
    if state == _COMMA_OR_CLOSE and symbol == ",":
        return _KEY if stack[-1] == "{" else _VALUE
    closes = _CLOSES.get(symbol)
    if closes and stack and stack[-1] == closes[0] and state in (_COMMA_OR_CLOSE, closes[1]):
        stack.pop()
        return _after_value(stack)
    return None


def check_json_text(text: str) -> None:
    """Raise ``ValueError`` unless ``text`` is exactly one JSON value (RFC 8259 syntax).

    Numbers may have any length and values any depth: the scan keeps an explicit stack, so
    it accepts what ``json.loads`` refuses (more than 4,300 digits, deep nesting) while
    still refusing any text that would end or open a field it does not own.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "a raw JSON text must be encodable as UTF-8: write a lone surrogate as a "
            "\\ud800-style escape"
        ) from None
    stack: list[str] = []
    state, pos = _VALUE, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"not a JSON value: unexpected character at offset {pos}")
        pos = match.end()
        kind = str(match.lastgroup)
        if kind == "ws":
            continue
        step = _step(state, match.group() if kind == "punct" else kind, stack)
        if step is None:
            raise ValueError(f"not a single JSON value: unexpected token at offset {match.start()}")
        state = step
    if state != _END:
        raise ValueError("not a single JSON value: the text ends early")


@dataclass(frozen=True)
class RawJson:
    """A JSON value given as text, served verbatim where a value would be rendered.

    Attributes:
        text: The JSON text; validated on construction (see :func:`check_json_text`).
    """

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"a raw JSON text must be a string, got {type(self.text).__name__}")
        check_json_text(self.text)

    @classmethod
    def rendered(cls, text: str) -> RawJson:
        """A text :func:`dumps` made itself: one JSON value already, so it is not scanned.

        The scan costs as much as the rendering: a page served from cached session texts
        would pay it again on every listing.
        """
        raw = object.__new__(cls)
        object.__setattr__(raw, "text", text)
        return raw


def _splice(document: str, token: str, texts: list[str]) -> str | None:
    """Replace each quoted placeholder by its raw text, in one pass; ``None`` on a collision."""
    seen: list[int] = []

    def raw(match: re.Match[str]) -> str:
        index = int(match.group(1))
        seen.append(index)
        return texts[index] if index < len(texts) else match.group()

    spliced = re.sub(f'"{token}:([0-9]+)"', raw, document)
    return spliced if sorted(seen) == list(range(len(texts))) else None


def dumps(value: Any) -> str:
    """Compact, ASCII-only JSON text of ``value``, with every :class:`RawJson` spliced in.

    Each :class:`RawJson` is first rendered as a string holding a fresh random token, then
    the quoted tokens are replaced by the raw texts in a single pass (a raw text is never
    scanned again). If some other string happens to equal a placeholder, the count check
    notices and the rendering is retried with a new token.
    """
    for _ in range(_ATTEMPTS):
        token = f"emulator-raw-{secrets.token_hex(16)}"
        texts: list[str] = []

        def placeholder(item: Any, token: str = token, texts: list[str] = texts) -> str:
            if isinstance(item, RawJson):
                texts.append(item.text)
                return f"{token}:{len(texts) - 1}"
            raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")

        document = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=placeholder)
        if not texts:
            return document
        spliced = _splice(document, token, texts)
        if spliced is not None:
            return spliced
    raise RuntimeError("could not render raw JSON fragments without a placeholder collision")


class JsonResponse(JSONResponse):
    """A JSON answer rendered by :func:`dumps`: ASCII bytes, raw fragments spliced in.

    Starlette's own ``JSONResponse`` renders with ``ensure_ascii=False`` and then encodes
    UTF-8, which raises on a lone surrogate; every emulator answer goes through this one.
    """

    def render(self, content: Any) -> bytes:
        """The body bytes: ASCII, except for non-ASCII characters a raw text holds verbatim."""
        return dumps(content).encode("utf-8")
