"""JSON Schema for function tools, in the dialect the function-calling API accepts.

pydantic writes complete JSON Schema; the API's strict function-calling mode accepts only
a subset of it. This module keeps what the model can use (types, descriptions, enums,
required lists, the supported numeric, pattern, format and array-size constraints), drops
the rest (titles, defaults, string lengths, ...), closes every object with
``additionalProperties: false`` and orders keys the same way every time, so a definition
diffs cleanly and an agent sees identical tools across deployments. Validation still runs
against the full pydantic model, so nothing dropped here goes unchecked.

:func:`strict_parameters_schema` writes the ``strict: true`` form on top of that (Chat
Completions, Responses, Assistants): the transform of the official SDK's
``openai.lib._pydantic.to_strict_json_schema``, made here so that ``handlers`` needs no SDK,
plus one step the SDK leaves out (see there).
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
    return clean_parameters(model.model_json_schema())


def clean_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite any JSON Schema of arguments (pydantic's, the SDK's) into the accepted subset.

    Public so that a schema written elsewhere (the official SDK's strict one, say) can be
    cleaned the same way and compared with ours.
    """
    schema = _clean(schema)
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


#: The schema that admits ``null``, as pydantic writes the ``None`` of ``X | None``.
_NULL: dict[str, Any] = {"type": "null"}


def strict_parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The ``parameters`` of a ``strict: true`` function definition for an arguments model.

    Strict mode makes the model send every property, so (as the SDK does) every object is
    closed and lists all its properties in ``required``, and a ``$ref`` with siblings is
    inlined (the API refuses siblings of ``$ref``). Unlike the SDK, a property that has a
    default in Python becomes nullable (``anyOf: [..., {"type": "null"}]``, the form pydantic
    gives ``X | None``): otherwise the model, made to send it, must invent a value where the
    tool meant "the default". :meth:`handlers.tool.Tool.parse` reads that ``null`` back as
    the default. A ``const`` property (a union's tag) stays as it is: it has one value only.
    """
    schema = parameters_schema(model)
    strict: dict[str, Any] = _strict(schema, schema)
    return strict


def _strict(node: Any, root: dict[str, Any]) -> Any:
    """The strict form of one cleaned schema node (``root`` resolves its ``$ref``)."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node and len(node) > 1:
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return _strict({**_resolve(root, node["$ref"]), **siblings}, root)
    out = dict(node)
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if isinstance(out.get("properties"), dict):
        out["properties"] = _strict_properties(out["properties"], out.get("required", []), root)
        out["required"] = list(out["properties"])
    if isinstance(out.get("$defs"), dict):
        out["$defs"] = {name: _strict(sub, root) for name, sub in out["$defs"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key], root)
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_strict(variant, root) for variant in out["anyOf"]]
    return _ordered(out)


def _strict_properties(
    properties: dict[str, Any], required: list[str], root: dict[str, Any]
) -> dict[str, Any]:
    """Each property made strict; those optional in Python made nullable first."""
    return {
        name: _strict(sub if name in required else _nullable(sub, root), root)
        for name, sub in properties.items()
    }


def _nullable(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """``node`` admitting ``null`` too, written as pydantic writes ``X | None``."""
    if "const" in node or _admits_null(node, root):
        return node
    rest = {k: v for k, v in node.items() if k != "description"}
    variants = rest["anyOf"] if list(rest) == ["anyOf"] else [rest]
    wrapped: dict[str, Any] = {"anyOf": [*variants, _NULL]}
    if "description" in node:
        wrapped["description"] = node["description"]
    return _ordered(wrapped)


def _admits_null(node: Any, root: dict[str, Any]) -> bool:
    """Whether a cleaned schema node already accepts ``null``."""
    if not isinstance(node, dict):
        return False
    if "$ref" in node:
        return _admits_null(_resolve(root, node["$ref"]), root)
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in node.get("enum", ()):
        return True
    if "anyOf" in node:
        return any(_admits_null(variant, root) for variant in node["anyOf"])
    return not {"type", "enum", "const"} & set(node)  # an unconstrained node takes anything


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any]:
    """The node a local ``$ref`` (``#/$defs/Name``) points at.

    Raises:
        ValueError: the reference is not local or points at nothing.
    """
    if not ref.startswith("#/"):
        raise ValueError(f"unsupported $ref {ref!r}: only local references (#/...) resolve")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        raise ValueError(f"$ref {ref!r} points at nothing")
    return node
