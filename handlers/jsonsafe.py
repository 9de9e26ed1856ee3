"""Reading JSON from untrusted places so that one bad part costs only itself.

toolfan parses JSON it does not control: pages of sessions from the Agents API, and the
``arguments`` the model writes for a tool call. :func:`json.loads` fails in three ways that
hostile, or merely unlucky, input can trigger:

* a document nested a few thousand levels deep raises :class:`RecursionError`, which is
  not a :class:`ValueError` and escapes callers that are ready only for bad JSON;
* one integer longer than :func:`sys.get_int_max_str_digits` allows fails the whole
  document, so a page of a hundred sessions is lost because of one number;
* ``NaN``, ``Infinity`` and ``-Infinity`` (and ``1e400``, which overflows) are accepted
  although they are not JSON, and could not be sent back.

:func:`loads` puts an :class:`Unreadable` where such a part was and reads the rest, so
that the poller keeps the other sessions and the model can be told why its arguments were
refused. Only text that is not JSON at all raises, and then always :class:`ValueError`.
:func:`check` applies the same rules to a value that is already parsed.

Ordinary documents are read by :mod:`json`'s C parser, after a pre-scan that proves they
are shallow enough for its recursion; the rare deeper ones are read by a slower parser
that keeps its own stack instead of recursing.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

__all__ = ["Unreadable", "check", "loads"]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """Stands in for a part of a JSON document toolfan refuses to hold; says why.

    Attributes:
        reason: a short message fit to show a model, e.g. ``"nested deeper than 64 levels"``.
    """

    reason: str


#: The deepest document handed to the recursive C parser (and to :func:`json.dumps`), far
#: below the default recursion limit of 1,000. Should the caller's own stack already be
#: deep enough for a RecursionError, the slower code without recursion takes over.
_FAST_DEPTH: Final = 200
_OUT_OF_RANGE: Final = "a number out of range"
_BOM: Final = b"\xef\xbb\xbf"
#: json's own (C) string reader; typeshed leaves it out of ``json.decoder``.
_scanstring: Final[Callable[[str, int, bool], tuple[str, int]]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _too_deep(max_depth: int) -> str:
    return f"nested deeper than {max_depth} levels"


def _too_many_digits(digits: int, limit: int) -> str:
    return f"a number with {digits:,} digits (at most {limit:,})"


def _parse_int(literal: str) -> int | Unreadable:
    try:
        return int(literal)
    except ValueError:  # longer than sys.get_int_max_str_digits() allows
        return Unreadable(_too_many_digits(len(literal.lstrip("-")), sys.get_int_max_str_digits()))


def _parse_float(literal: str) -> float | Unreadable:
    number = float(literal)
    return number if math.isfinite(number) else Unreadable(_OUT_OF_RANGE)


def _parse_constant(literal: str) -> Unreadable:
    return Unreadable(f"{literal} is not a JSON number")


# Integers are converted in C; only a document holding one too long for that is read again
# with a Python hook per integer, which costs about 15% on a page.
_DECODER: Final = json.JSONDecoder(parse_float=_parse_float, parse_constant=_parse_constant)
_DECODER_LONG_INTS: Final = json.JSONDecoder(
    parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant
)


def loads(data: str | bytes, *, max_depth: int = 64) -> Any:
    """Parse a JSON document, replacing the parts toolfan cannot hold by :class:`Unreadable`.

    Each object or array deeper than ``max_depth`` (the outermost one is at depth 1) is
    replaced, as a whole, by an :class:`Unreadable`, and so are integers too long to
    convert, ``NaN``, ``Infinity``, ``-Infinity`` and floats that overflow: a hostile part
    of a page or of a tool call's arguments then costs only itself, never the whole page.

    Args:
        data: the document; bytes must be UTF-8, with or without a byte order mark.
        max_depth: how deeply objects and arrays may nest, at least 1.

    Returns:
        Exactly what :func:`json.loads` returns for an ordinary document (same types,
        values and key order), with :class:`Unreadable` where a part was refused.

    Raises:
        ValueError: ``data`` is not JSON (never any other exception for bad input).
    """
    _require_depth(max_depth)
    if isinstance(data, str):
        return _loads_text(data, data, max_depth)
    raw = _as_bytes(data)
    return _loads_text(_decode_utf8(raw), raw, max_depth)


def _require_depth(max_depth: int) -> None:
    if not isinstance(max_depth, int) or max_depth < 1:
        raise ValueError(f"max_depth must be an integer of at least 1, not {max_depth!r}")


def _as_bytes(data: object) -> bytes:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise ValueError(f"JSON must be str or bytes, not {type(data).__name__}")


def _decode_utf8(raw: bytes) -> str:
    body = raw.removeprefix(_BOM)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start + len(raw) - len(body)
        raise ValueError(f"not UTF-8: {exc.reason} at byte {at:,}") from None


def _loads_text(text: str, source: str | bytes, max_depth: int) -> Any:
    if _nests_at_most(source, min(max_depth, _FAST_DEPTH)):
        try:
            return _decode_fast(text)
        except RecursionError:
            pass  # the caller's own stack was already deep: read it without recursion
    return _Parser(text, max_depth).parse()


def _decode_fast(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer with too many digits: read again, converting each one
        return _DECODER_LONG_INTS.decode(text)


# The pre-scan works on bytes, where translate() and replace() run at memory speed.
_TO_SQUARE: Final = bytes.maketrans(b"{}", b"[]")
_ALL_BUT_QUOTES_AND_BRACKETS: Final = bytes(set(range(256)) - set(b'"[]{}'))
# Where a quote may be escaped, backslashes stay too, and every character that may follow
# one in JSON, so that each escape keeps its own second character next to it.
_ESCAPE_CHARACTERS: Final = b"\\/bfnrtu"
_ALL_BUT_ESCAPES_QUOTES_AND_BRACKETS: Final = bytes(
    set(range(256)) - set(b'"[]{}' + _ESCAPE_CHARACTERS)
)
_ESCAPED_QUOTE_OR_BACKSLASH: Final = re.compile(rb'\\["\\]')


def _nests_at_most(source: str | bytes, limit: int) -> bool:
    """Whether JSON's own parser, reading ``source``, surely nests at most ``limit`` deep.

    A false answer means "maybe deeper". Brackets inside strings are ignored (and a byte
    order mark, like any byte that is not ASCII); where the text stops being JSON the
    answer may be wrong, but only past the point where the parser stops with an error.
    """
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
    if raw.count(b"[") + raw.count(b"{") <= limit:  # most tool-call arguments
        return True
    return _bracket_height_at_most(_brackets_outside_strings(raw), limit)


def _brackets_outside_strings(raw: bytes) -> bytes:
    """The brackets of ``raw`` that are not inside strings, ``{}`` written as ``[]``."""
    if b'\\"' in raw:
        sig = raw.translate(_TO_SQUARE, _ALL_BUT_ESCAPES_QUOTES_AND_BRACKETS)
        sig = _ESCAPED_QUOTE_OR_BACKSLASH.sub(b"", sig).translate(None, _ESCAPE_CHARACTERS)
    else:  # no quote is escaped
        sig = raw.translate(_TO_SQUARE, _ALL_BUT_QUOTES_AND_BRACKETS)
    # Each quote now opens or closes a string. Dropping '""' (an empty string, or two
    # strings with no bracket between them) keeps that alternation and empties most pages.
    sig = sig.replace(b'""', b"")
    if b'"' in sig:
        sig = b"".join(sig.split(b'"')[::2])
    return sig


def _bracket_height_at_most(brackets: bytes, limit: int) -> bool:
    """Whether the deepest nesting of ``brackets`` (``[`` and ``]`` only) is at most ``limit``.

    Each pass removes every innermost ``[]``: one level off the height of every pair left.
    """
    for passes in range(limit):
        if not brackets:
            return True
        if b"[" * (limit - passes + 1) in brackets:  # so many levels still opened in a row
            return False
        inner = brackets.replace(b"[]", b"")
        if len(inner) == len(brackets):  # only unmatched brackets left: not JSON, but how deep?
            return passes + len(inner) <= limit
        brackets = inner
    return not brackets


_WHITESPACE: Final = re.compile(r"[ \t\n\r]+")
_WHITESPACE_CHARACTERS: Final = frozenset(" \t\n\r")
_RUN_OF_OPENERS: Final = re.compile(r"\[+")
_RUN_OF_CLOSERS: Final = re.compile(r"\]+")
_ARRAY: Final = ord("[")
_KIND: Final = {"[": b"[", "{": b"{"}
# What the parser expects next.
_VALUE, _KEY, _AFTER_VALUE, _DONE = range(4)


class _Parser:
    """A JSON parser with its own stack, for documents too deep for :mod:`json`'s.

    ``kinds`` holds one byte per open container, ``[`` or ``{``; only the outer
    ``max_depth`` of them are built (``frames``, with the pending key of each object in
    ``keys``). Deeper containers are only checked, and become one :class:`Unreadable`.
    """

    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.pos = 0
        self.max_depth = max_depth
        self.kinds = bytearray()
        self.frames: list[list[Any] | dict[str, Any]] = []
        self.keys: list[str] = []
        self.result: Any = None
        self.too_deep = Unreadable(_too_deep(max_depth))

    def parse(self) -> Any:
        """The document's value; raises ``json.JSONDecodeError`` where it is not JSON."""
        state = _VALUE
        while state != _DONE:
            if state == _VALUE:
                state = self._value()
            elif state == _KEY:
                state = self._key()
            else:
                state = self._after_value()
        pos, char = self._peek(self.pos)
        if char:
            raise self._error("Extra data", pos)
        return self.result

    def _error(self, message: str, pos: int) -> json.JSONDecodeError:
        return json.JSONDecodeError(message, self.text, pos)

    def _peek(self, pos: int) -> tuple[int, str]:
        """Where the next token starts, past whitespace, and its first character."""
        char = self.text[pos : pos + 1]
        if char in _WHITESPACE_CHARACTERS and (match := _WHITESPACE.match(self.text, pos)):
            pos = match.end()
            char = self.text[pos : pos + 1]
        return pos, char

    def _value(self) -> int:
        pos, char = self._peek(self.pos)
        if char in ("[", "{"):
            return self._open(char, pos)
        # A string, number or literal: json reads it the same way as in a shallow document.
        value, self.pos = _DECODER_LONG_INTS.raw_decode(self.text, pos)
        self._emit(value)
        return _AFTER_VALUE

    def _open(self, char: str, pos: int) -> int:
        count = 1
        if len(self.kinds) < self.max_depth:
            self.frames.append([] if char == "[" else {})
            self.keys.append("")
        elif self.text.startswith("[[", pos):  # not built: take a run of '[' at once
            run = _RUN_OF_OPENERS.match(self.text, pos)
            count = run.end() - pos if run else 1
        self.kinds += _KIND[char] * count
        pos, next_char = self._peek(pos + count)
        if next_char == ("]" if char == "[" else "}"):
            self._close(pos)
            return _AFTER_VALUE
        self.pos = pos
        return _VALUE if char == "[" else _KEY

    def _key(self) -> int:
        pos, char = self._peek(self.pos)
        if char != '"':
            raise self._error("Expecting property name enclosed in double quotes", pos)
        key, pos = _scanstring(self.text, pos + 1, True)
        pos, char = self._peek(pos)
        if char != ":":
            raise self._error("Expecting ':' delimiter", pos)
        self.pos = pos + 1
        if len(self.kinds) <= self.max_depth:
            self.keys[-1] = key
        return _VALUE

    def _after_value(self) -> int:
        if not self.kinds:
            return _DONE
        pos, char = self._peek(self.pos)
        is_array = self.kinds[-1] == _ARRAY
        if char == ",":
            self.pos = pos + 1
            return _VALUE if is_array else _KEY
        if char != ("]" if is_array else "}"):
            raise self._error("Expecting ',' delimiter", pos)
        self._close(pos)
        return _AFTER_VALUE

    def _close(self, pos: int) -> None:
        """Close the innermost container at ``pos``, or a run of unbuilt arrays at once."""
        count = self._closable_run(pos)
        if count:
            del self.kinds[-count:]
            self.pos = pos + count
            return
        depth = len(self.kinds)
        self.kinds.pop()
        self.pos = pos + 1
        if depth <= self.max_depth:
            self.keys.pop()
            self._emit(self.frames.pop())
        elif depth == self.max_depth + 1:
            self._emit(self.too_deep)

    def _closable_run(self, pos: int) -> int:
        """How many ``]`` from ``pos`` close unbuilt arrays that are not the outermost one."""
        spare = len(self.kinds) - self.max_depth - 1
        run = _RUN_OF_CLOSERS.match(self.text, pos) if self.text.startswith("]]", pos) else None
        if run is None or spare <= 0:
            return 0
        count = min(run.end() - pos, spare)
        last_object = self.kinds.rfind(b"{", len(self.kinds) - count)
        return count if last_object < 0 else len(self.kinds) - last_object - 1

    def _emit(self, value: Any) -> None:
        """Put a finished value into its container, or keep it if it is the document."""
        depth = len(self.kinds)
        if depth > self.max_depth:
            return
        if not depth:
            self.result = value
        elif isinstance(frame := self.frames[-1], list):
            frame.append(value)
        else:
            frame[self.keys[-1]] = value


def check(value: Any, *, max_depth: int, max_bytes: int | None = None) -> str | None:
    """Why an already parsed value cannot be used as JSON, or None if it can.

    For values that did not come straight from :func:`loads`, or parts taken out of one
    (such as the ``arguments`` of one call on a page), before they are handed to a tool
    or sent on. Problems are looked for level by level, so the shallowest one is named:
    an :class:`Unreadable` (its reason), nesting deeper than ``max_depth`` (counted as in
    :func:`loads`), a float that is not finite, an integer with too many digits, or
    anything that is not a JSON value (a dict key that is not a string, a set, a tuple, an
    object). Then, if ``max_bytes`` is given, the size of the compact UTF-8 encoding. The
    walk keeps its own stack, so no value, however deep or cyclic, makes it raise.

    Args:
        value: the parsed value.
        max_depth: how deeply lists and dicts may nest, at least 1.
        max_bytes: the most bytes its compact JSON encoding may take, if limited.

    Returns:
        A short reason fit to show a model, or None when the value can be used.

    Raises:
        ValueError: ``max_depth`` is below 1 or ``max_bytes`` below 0.
    """
    _require_depth(max_depth)
    if max_bytes is not None and max_bytes < 0:
        raise ValueError(f"max_bytes must not be negative, not {max_bytes!r}")
    problem, depth = _structure_problem(value, max_depth)
    if problem is None and max_bytes is not None:
        size = _encoded_size(value, depth)
        if size > max_bytes:
            problem = f"{size:,} bytes (at most {max_bytes:,})"
    return problem


def _structure_problem(value: Any, max_depth: int) -> tuple[str | None, int]:
    """The shallowest problem in ``value`` and the depth of its deepest container."""
    level = [value]
    depth = 0
    while True:
        containers: list[list[Any] | dict[Any, Any]] = []
        for item in level:
            if isinstance(item, list | dict):
                containers.append(item)
            elif type(item) is not str and (problem := _scalar_problem(item)) is not None:
                return problem, depth
        if not containers:
            return None, depth
        depth += 1
        if depth > max_depth:
            return _too_deep(max_depth), depth
        level = []
        for container in containers:
            if isinstance(container, dict):
                if (problem := _key_problem(container)) is not None:
                    return problem, depth
                level.extend(container.values())
            else:
                level.extend(container)


def _key_problem(container: dict[Any, Any]) -> str | None:
    for key in container:
        if not isinstance(key, str):
            return f"not a JSON value: a dict key of type {type(key).__name__}"
    return None


def _scalar_problem(value: Any) -> str | None:
    if value is None or isinstance(value, str | bool):
        return None
    if isinstance(value, int):
        return _int_problem(value)
    if isinstance(value, float):
        return None if math.isfinite(value) else _OUT_OF_RANGE
    if isinstance(value, Unreadable):
        return value.reason
    return f"not a JSON value: {type(value).__name__}"


def _int_problem(value: int) -> str | None:
    limit = sys.get_int_max_str_digits()
    # Fewer than 3 bits a digit: surely short enough, without computing 10 ** limit.
    if not limit or value.bit_length() <= 3 * limit or abs(value) < _power_of_ten(limit):
        return None
    return _too_many_digits(math.floor(math.log10(abs(value))) + 1, limit)


@cache
def _power_of_ten(exponent: int) -> int:
    power: int = 10**exponent
    return power


def _encoded_size(value: Any, depth: int) -> int:
    """Bytes in the compact UTF-8 JSON encoding of a value that passed the walk."""
    if depth <= _FAST_DEPTH:
        try:
            return _utf8_size(_compact(value))
        except RecursionError:
            pass  # the caller's own stack was already deep: count without recursion
    return _encoded_size_without_recursion(value)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _encoded_size_without_recursion(value: Any) -> int:
    size = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list | dict):
            # Brackets, commas between members and, in an object, a colon after each key.
            size += 2 + max(len(item) - 1, 0)
            pending.extend(item)
            if isinstance(item, dict):
                size += len(item)
                pending.extend(item.values())
        else:
            size += _utf8_size(_compact(item))
    return size


def string_pairs(value: Any) -> dict[str, str]:
    """The string-to-string pairs of a metadata object an API sent (anything else: none)."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
