"""400 answers in the real API's words, and the small field checks both endpoints share.

The messages and ``param`` paths copy the ones OpenAI sends (``Missing required parameter:
'messages[0].role'.``, ``Invalid type for 'x': expected a string, but got an object
instead.``), so a client's error handling meets the texts it will meet in production.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.runs.outputs import json_type
from emulator.wire import JSON, WireError

#: Part type -> the key holding its text, or ``None`` for a part without text (an image).
PartTexts = Mapping[str, str | None]


def bad(message: str, param: str | None = None, code: str | None = None) -> WireError:
    """A 400 ``invalid_request_error``."""
    return WireError(400, message, code=code, param=param)


def missing(param: str) -> WireError:
    """The answer to a required field left out (or null)."""
    return bad(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def invalid_type(param: str, expected: str, value: Any) -> WireError:
    """The answer to a field of the wrong JSON type, naming the type the API expects."""
    return bad(
        f"Invalid type for '{param}': expected {expected}, but got {json_type(value)} instead.",
        param,
        "invalid_type",
    )


def empty_array(param: str) -> WireError:
    """The answer to an array that must hold at least one element."""
    return bad(
        f"Invalid '{param}': empty array. Expected an array with minimum length 1, but got "
        "an empty array instead.",
        param,
        "empty_array",
    )


def quoted_list(values: Sequence[str]) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b', and 'c'``: how the API lists allowed values."""
    quoted = [f"'{value}'" for value in values]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def invalid_value(param: str, value: Any, allowed: Sequence[str]) -> WireError:
    """The answer to a value outside an enumeration, listing the supported values."""
    return bad(
        f"Invalid value: '{value}'. Supported values are: {quoted_list(allowed)}.",
        param,
        "invalid_value",
    )


def child(where: str, key: str) -> str:
    """The ``param`` path of ``key`` inside ``where`` (the body itself when ``where`` is empty)."""
    return f"{where}.{key}" if where else key


def an_object(value: Any, param: str) -> JSON:
    """``value`` if it is a JSON object, else a 400 naming ``param``."""
    if not isinstance(value, dict):
        raise invalid_type(param, "an object", value)
    return value


def required_string(container: JSON, key: str, where: str = "") -> str:
    """The string ``container[key]``; missing (or null) and non-string values are a 400."""
    value = container.get(key)
    if value is None:
        raise missing(child(where, key))
    if not isinstance(value, str):
        raise invalid_type(child(where, key), "a string", value)
    return value


def optional_bool(container: JSON, key: str, default: bool, where: str = "") -> bool:
    """The boolean ``container[key]``, ``default`` when absent or null."""
    value = container.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid_type(child(where, key), "a boolean", value)
    return value


def content_text(content: Any, param: str, parts: PartTexts) -> str:
    """The text of a message content: a string, or an array of the allowed parts.

    Text parts are joined by line breaks; parts without text (images, files) add nothing.
    Any other part type is refused with the list of the supported ones.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_type(param, "one of a string or array of objects", content)
    texts: list[str] = []
    for index, value in enumerate(content):
        where = f"{param}[{index}]"
        part = an_object(value, where)
        kind = part.get("type")
        if kind is None:
            raise missing(f"{where}.type")
        if kind not in parts:
            raise invalid_value(f"{where}.type", kind, list(parts))
        key = parts[kind]
        if key is not None:
            texts.append(required_string(part, key, where))
    return "\n".join(texts)


def request_body(body: Any) -> JSON:
    """The body as an object; ``stream: true`` is refused (the emulator answers whole)."""
    if not isinstance(body, dict):
        raise bad("The request body must be a JSON object.", None, "invalid_type")
    if optional_bool(body, "stream", False):
        raise bad(
            "Streaming is not supported by the emulator: send 'stream': false or leave it out.",
            "stream",
            "unsupported_value",
        )
    return body
