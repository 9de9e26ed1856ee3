"""Turning whatever a tool returns into the ``output`` the API accepts.

The Agents API takes a string or a content array of ``input_text``/``input_image`` parts.
Tools should not have to care: they return plain Python values and pydantic models, and
this module serializes them compactly and cuts what is too long, saying so in the output
so that the model knows it saw only part of it.

What leaves here is checked as strictly as the API checks it, so one tool's odd output
fails that one call with a clear message instead of getting the whole batch refused: text
holds no lone surrogates, empty text parts are dropped (the API refuses them), an image
needs a non-empty ``http(s)`` or ``data:`` URL within the size limit, and a content array
stays within its part and byte limits (:class:`handlers.limits.Limits`).
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from pydantic import BaseModel, TypeAdapter, ValidationError

from handlers.limits import DEFAULT_LIMITS, Limits
from handlers.result import ContentPart, InputImage, InputText, Output
from handlers.text import scrub

_CONTENT = TypeAdapter(list[ContentPart])
_PART_TYPES = frozenset({"input_text", "input_image"})
_IMAGE_SCHEMES = ("http://", "https://", "data:")


class OutputError(ValueError):
    """A tool returned something that cannot be sent to the API."""


def truncation_marker(original: int, kept: int) -> str:
    """The note appended to a cut output; states the original length for the model."""
    return f"\n[output truncated: {original} characters, showing the first {kept}]"


def serialize(value: Any, max_chars: int, limits: Limits = DEFAULT_LIMITS) -> Output:
    """Serialize a tool's return value and cut it to ``max_chars`` characters of text.

    Raises:
        OutputError: the value is a malformed content array, breaks a content limit, or
            cannot be made JSON.
    """
    if _looks_like_content(value):
        if len(value) > limits.content_parts:
            raise OutputError(
                f"a content array of {len(value):,} parts (at most {limits.content_parts:,})"
            )
        parts = _check_parts(_validate_content(value), limits)
        return _truncate_parts(parts, max_chars) if parts else ""
    return truncate(scrub(_to_text(value)), max_chars)


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` so that, marker included, it fits in ``max_chars`` where possible."""
    if len(text) <= max_chars:
        return text
    kept = max(0, max_chars - len(truncation_marker(len(text), max_chars)))
    return text[:kept] + truncation_marker(len(text), kept)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        return pydantic_core.to_json(value).decode()
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        raise OutputError(f"cannot serialize {type(value).__name__} to JSON: {exc}") from exc


def _looks_like_content(value: Any) -> bool:
    """A non-empty list whose items all declare a content-part type."""
    if not isinstance(value, list) or not value:
        return False
    return all(_part_type(item) in _PART_TYPES for item in value)


def _part_type(item: Any) -> str | None:
    if isinstance(item, BaseModel):
        kind = getattr(item, "type", None)
    else:
        kind = item.get("type") if isinstance(item, dict) else None
    return kind if isinstance(kind, str) else None


def _validate_content(value: list[Any]) -> list[ContentPart]:
    raw = [item.model_dump() if isinstance(item, BaseModel) else item for item in value]
    try:
        return _CONTENT.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise OutputError(f"invalid content part at {where}: {first['msg']}") from exc


def _check_parts(parts: list[ContentPart], limits: Limits) -> list[ContentPart]:
    """Scrubbed parts without empty texts; raises on an image or a size the API refuses."""
    kept: list[ContentPart] = []
    size = 0
    for index, part in enumerate(parts):
        if isinstance(part, InputText):
            if not part.text:
                continue
            part = InputText(text=scrub(part.text))
            size += len(part.text.encode())
        else:
            _check_image(part, index, limits)
            size += len(part.image_url)
        kept.append(part)
    if size > limits.content_bytes:
        raise OutputError(f"a content array of {size:,} bytes (at most {limits.content_bytes:,})")
    return kept


def _check_image(part: InputImage, index: int, limits: Limits) -> None:
    url = part.image_url
    if not url.startswith(_IMAGE_SCHEMES):
        raise OutputError(f"part {index}: image_url must be an http(s) or data: URL")
    if len(url) > limits.image_url_chars:
        raise OutputError(
            f"part {index}: an image_url of {len(url):,} characters "
            f"(at most {limits.image_url_chars:,})"
        )
    scrubbed = scrub(url)
    if scrubbed != url:
        raise OutputError(f"part {index}: image_url holds characters no URL can")


def _truncate_parts(parts: list[ContentPart], max_chars: int) -> list[ContentPart]:
    """Cut text parts so that all text together stays within ``max_chars``."""
    budget, cut = max_chars, []
    for part in parts:
        if isinstance(part, InputText):
            text = truncate(part.text, budget) if len(part.text) > budget else part.text
            budget = max(0, budget - len(text))
            part = InputText(text=text)
        cut.append(part)
    return cut
