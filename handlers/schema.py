"""JSON Schema for function tools, in the dialect the function-calling API accepts.

pydantic writes complete JSON Schema; the API's strict function-calling mode accepts only
a subset of it. This module keeps what the model can use (types, descriptions, enums,
required lists, the supported numeric, pattern, format and array-size constraints), drops
the rest (titles, defaults, string lengths, ...), closes every object with
``additionalProperties: false`` and orders keys the same way every time, so a definition
diffs cleanly and an agent sees identical tools across deployments. Validation still runs
against the full pydantic model, so nothing dropped here goes unchecked.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

#: Keywords kept, in the order they are written.
_KEY_ORDER = (
    "type",
    "description",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "anyOf",
    "pattern",
    "format",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "$ref",
    "$defs",
)
_KEPT = frozenset(_KEY_ORDER)
_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The ``parameters`` object of a function definition for an arguments model."""
    schema = _clean(model.model_json_schema())
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    schema["additionalProperties"] = False
    schema.pop("description", None)  # the tool's own description says it once
    return _ordered(schema)


def _clean(node: Any) -> Any:
    """Recursively rewrite a pydantic schema node into the accepted subset."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "oneOf" in node:  # discriminated unions: the accepted subset knows only anyOf
        node["anyOf"] = node.pop("oneOf")
    if "allOf" in node and len(node["allOf"]) == 1:  # pydantic's wrapper around a lone $ref
        node.update(node.pop("allOf")[0])
    if node.get("format") not in _FORMATS:
        node.pop("format", None)
    out = {k: _clean_value(k, v) for k, v in node.items() if k in _KEPT}
    if "properties" in out:
        out["additionalProperties"] = False
        out.setdefault("required", [])
    return _ordered(out)


def _clean_value(key: str, value: Any) -> Any:
    if key in ("properties", "$defs"):
        return {name: _clean(sub) for name, sub in value.items()}
    return _clean(value)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    return {k: node[k] for k in _KEY_ORDER if k in node}
