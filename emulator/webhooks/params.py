"""Validation of the endpoints API's bodies and queries, in the real API's terms.

Errors are 400s in the OpenAI shape with ``param`` naming the offending field, so a client
that sends what the real service would refuse is refused here too. One deliberate leniency:
``url`` may be ``http://`` as well as ``https://``, because test receivers are local.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from emulator.webhooks.events import EVENT_TYPES
from emulator.wire import WireError

CREATE_KEYS = frozenset({"url", "name", "event_types"})
_KNOWN_TYPES = frozenset(EVENT_TYPES)
MAX_NAME = 256
MAX_URL = 2048


@dataclass(frozen=True)
class EndpointChange:
    """The fields a create or update sets; ``None``: left as is (or defaulted on create)."""

    url: str | None = None
    name: str | None = None
    event_types: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ListQuery:
    """``limit`` (1..100, default 20) and the ``after`` cursor."""

    limit: int = 20
    after: str | None = None


def _bad(message: str, param: str | None, code: str = "invalid_value") -> WireError:
    return WireError(400, message, code=code, param=param)


def _object(body: Any, known: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise _bad("The request body must be a JSON object.", None, "invalid_type")
    for key in body:
        if key not in known:
            raise _bad(f"Unrecognized request argument supplied: {key}", key, "unknown_parameter")
    return body


def _url(value: Any) -> str:
    if not isinstance(value, str):
        raise _bad("Invalid type for 'url': expected a string.", "url", "invalid_type")
    parts = urlsplit(value)
    if parts.scheme not in {"https", "http"} or not parts.hostname or len(value) > MAX_URL:
        raise _bad(
            f"Invalid 'url': '{value}' is not a valid https:// (or http://) URL.",
            "url",
            "invalid_url",
        )
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise _bad("Invalid type for 'name': expected a string.", "name", "invalid_type")
    if len(value) > MAX_NAME:
        raise _bad(
            f"Invalid 'name': at most {MAX_NAME} characters.", "name", "string_above_max_length"
        )
    return value


def _event_types(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _bad(
            "Invalid type for 'event_types': expected an array of strings.",
            "event_types",
            "invalid_type",
        )
    if not value:
        raise _bad("Invalid 'event_types': at least one event type is required.", "event_types")
    for index, item in enumerate(value):
        if item not in _KNOWN_TYPES:
            raise _bad(
                f"Invalid value for 'event_types[{index}]': {item!r} is not a webhook event type.",
                f"event_types[{index}]",
            )
    return tuple(dict.fromkeys(value))


def event_type(value: Any, param: str = "event_type") -> str:
    """One known event type (a test's ``event_type``)."""
    if value is None:
        raise _bad(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    if value not in _KNOWN_TYPES:
        raise _bad(f"Invalid value for '{param}': {value!r} is not a webhook event type.", param)
    return str(value)


def parse_create(body: Any) -> EndpointChange:
    """A create body: ``url`` and ``event_types`` required, ``name`` optional."""
    fields = _object(body, CREATE_KEYS)
    for required in ("url", "event_types"):
        if required not in fields:
            raise _bad(
                f"Missing required parameter: '{required}'.", required, "missing_required_parameter"
            )
    return EndpointChange(
        url=_url(fields["url"]),
        name=_name(fields.get("name", "")),
        event_types=_event_types(fields["event_types"]),
    )


def parse_update(body: Any) -> EndpointChange:
    """An update body: any of ``url``, ``name``, ``event_types``."""
    fields = _object(body, CREATE_KEYS)
    return EndpointChange(
        url=_url(fields["url"]) if "url" in fields else None,
        name=_name(fields["name"]) if "name" in fields else None,
        event_types=_event_types(fields["event_types"]) if "event_types" in fields else None,
    )


def parse_rotate(body: Any) -> bool:
    """``keep_old_secret_active_for_24_hours`` (default false)."""
    key = "keep_old_secret_active_for_24_hours"
    fields = _object(body, frozenset({key}))
    keep = fields.get(key, False)
    if not isinstance(keep, bool):
        raise _bad(f"Invalid type for '{key}': expected a boolean.", key, "invalid_type")
    return keep


def parse_test(body: Any) -> str:
    """A test body: ``{"event_type"}``."""
    return event_type(_object(body, frozenset({"event_type"})).get("event_type"))


def parse_list(items: Sequence[tuple[str, str]]) -> ListQuery:
    """``limit`` and ``after``; other query parameters are ignored, as the API does."""
    params = dict(items)
    raw = params.get("limit")
    limit = 20
    if raw is not None:
        try:
            limit = int(raw)
        except ValueError:
            raise _bad(
                f"Invalid 'limit': expected an integer, got '{raw}'.", "limit", "invalid_type"
            ) from None
        if not 1 <= limit <= 100:
            raise _bad(f"Invalid 'limit': must be between 1 and 100, got {limit}.", "limit")
    return ListQuery(limit=limit, after=params.get("after") or None)
