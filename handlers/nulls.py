"""Reading a ``null`` the model sent for an argument that has a default as "the default".

A strict schema (:func:`handlers.schema.strict_parameters_schema`) makes every property
required and those with a default nullable, so a model that means "leave it at its default"
sends ``null``. Where the type itself refuses None (``unit: Literal[...] = "celsius"``), that
``null`` would fail validation; this module finds such nulls in the validation errors and
removes their keys, so that the second validation applies the default. A ``null`` that the
type accepts (``note: str | None = "x"``) never fails, so it stays None; one for a required
property (no default) or a list item is left alone and still fails.

The positions are read off the model's JSON Schema (its ``required`` lists are exactly the
fields without a default, named as the arguments name them, aliases included), walked along
each error's location through nested models, lists and unions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

Path = tuple[str | int, ...]


def without_default_nulls(
    model: type[BaseModel], arguments: dict[str, Any], errors: Iterable[ErrorDetails]
) -> dict[str, Any] | None:
    """``arguments`` without the nulls that stand for a default, or None when none did.

    Only nulls that failed validation count (``errors`` of validating ``arguments`` with
    ``model``); ``arguments`` itself is not changed.
    """
    schema = _schema(model)
    if schema is None:
        return None
    paths = {p for e in errors if e["input"] is None for p in _default_null(schema, arguments, e)}
    if not paths:
        return None
    for path in sorted(paths, key=len, reverse=True):
        arguments = _without(arguments, path)
    return arguments


@functools.lru_cache(maxsize=512)
def _schema(model: type[BaseModel]) -> dict[str, Any] | None:
    """The model's JSON Schema (validation side, by alias), or None if it has none."""
    try:
        return model.model_json_schema()
    except Exception:  # a type pydantic cannot describe: no defaults to find, then
        return None


def _default_null(schema: dict[str, Any], data: Any, error: ErrorDetails) -> list[Path]:
    """The path of the null ``error`` is about, if it sits at a property with a default.

    Location steps that are not keys or indices of the data (a union member's name or
    tag, which pydantic puts in ``loc``) are skipped.
    """
    nodes, path = _expand([schema], schema), list[str | int]()
    for step in error["loc"]:
        if isinstance(data, dict) and isinstance(step, str) and step in data:
            data, path = data[step], [*path, step]
            if data is None:
                return [tuple(path)] if _optional(nodes, step) else []
            nodes = _expand(_children(nodes, step), schema)
        elif isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
            data, path = data[step], [*path, step]
            if data is None:  # a list item has no default
                return []
            nodes = _expand(_items(nodes, step), schema)
    return []


def _optional(nodes: Sequence[dict[str, Any]], key: str) -> bool:
    """Whether every object schema that declares ``key`` gives it a default."""
    owners = [n for n in nodes if key in n.get("properties", {})]
    return bool(owners) and all(key not in n.get("required", ()) for n in owners)


def _children(nodes: Sequence[dict[str, Any]], key: str) -> list[Any]:
    found = [n["properties"][key] for n in nodes if key in n.get("properties", {})]
    return found + [n["additionalProperties"] for n in nodes if "additionalProperties" in n]


def _items(nodes: Sequence[dict[str, Any]], index: int) -> list[Any]:
    found: list[Any] = []
    for node in nodes:
        prefix = node.get("prefixItems", [])
        found.append(prefix[index] if index < len(prefix) else node.get("items"))
    return found


def _expand(nodes: Iterable[Any], root: dict[str, Any], depth: int = 0) -> list[dict[str, Any]]:
    """The schemas a value may match: ``$ref`` resolved, unions flattened into members."""
    out: list[dict[str, Any]] = []
    for node in nodes:
        if not isinstance(node, dict) or depth > 20:  # depth: a cycle of bare references
            continue
        if isinstance(node.get("$ref"), str):
            out += _expand([_resolve(root, node["$ref"])], root, depth + 1)
        members = [m for key in ("anyOf", "oneOf", "allOf") for m in node.get(key, ())]
        out += _expand(members, root, depth + 1) if members else []
        out.append(node)
    return out


def _resolve(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _without(data: Any, path: Path) -> Any:
    """A copy of ``data`` without the key at ``path`` (containers copied along the way)."""
    step, rest = path[0], path[1:]
    if isinstance(data, dict):
        if not rest:
            return {k: v for k, v in data.items() if k != step}
        return {**data, step: _without(data[step], rest)}
    copied = list(data)
    copied[int(step)] = _without(copied[int(step)], rest)
    return copied
