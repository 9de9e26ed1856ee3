"""Strict schemas against the official SDK's own transform (``to_strict_json_schema``).

Ours must be the SDK's, cleaned the same way, except for one deliberate step: properties
with a Python default are nullable. So each schema is compared with the SDK's after both
are dereferenced and stripped of nullability; nullability is then checked on its own,
property by property; and the SDK's transform, run on ours, must change nothing.
"""

import copy
from enum import StrEnum
from typing import Annotated, Any, Literal

import pytest
from openai.lib._pydantic import _ensure_strict_json_schema, to_strict_json_schema
from openai.lib.beta.agents import function_tool
from pydantic import BaseModel, Field

import handlers.examples
from handlers import Tool
from handlers.schema import clean_parameters, strict_parameters_schema

NULL = {"type": "null"}


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    """A postal address."""

    street: str = Field(description="Street and number")
    zip_code: str | None = None
    country: str = "FR"


class Nested(BaseModel):
    home: Address = Field(description="Where they live")
    work: Address | None = None
    billing: Address = Address(street="1 rue de la Paix")


class ListOfModels(BaseModel):
    stops: list[Address]
    extra_stops: list[Address] = Field(default_factory=list, description="More stops")


class Optionals(BaseModel):
    note: str | None = None
    maybe_required: int | None
    label: str | None = "x"


class Defaults(BaseModel):
    count: Annotated[int, Field(description="How many", ge=1, le=10)] = 5
    ratio: float = 0.5
    flags: list[str] = ["a"]
    either: int | str = 3
    tags: dict[str, int] = Field(default_factory=dict)


class Enums(BaseModel):
    color: Color
    accent: Color = Color.BLUE
    mode: Literal["fast", "cheap"] = "fast"
    level: Literal[1, 2, 3]


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


class Union(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    pets: list[Annotated[Cat | Dog, Field(discriminator="kind")]] = []


@function_tool
def sdk_made(city: str, unit: Literal["c", "f"] = "c", days: int | None = None) -> str:
    """A function_tool's model: fields aliased to the parameter names."""
    return city


def example_models() -> list[type[BaseModel]]:
    return [v.args.model for v in vars(handlers.examples).values() if isinstance(v, Tool)]


MODELS = [*example_models(), Nested, ListOfModels, Optionals, Defaults, Enums, Union]
MODELS.append(sdk_made._model)


def ids(model: type[BaseModel]) -> str:
    return model.__name__


def resolve(root: dict, ref: str) -> dict:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def deref(node: Any, root: dict) -> Any:
    """Every ``$ref`` replaced by what it points at (siblings win), ``$defs`` dropped."""
    if isinstance(node, list):
        return [deref(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return deref({**resolve(root, node["$ref"]), **siblings}, root)
    return {k: deref(v, root) for k, v in node.items() if k != "$defs"}


def without_null(node: Any) -> Any:
    """The schema with every ``null`` alternative taken out of its unions."""
    if isinstance(node, list):
        return [without_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {k: without_null(v) for k, v in node.items()}
    if "anyOf" in node:
        variants = [v for v in node["anyOf"] if v != NULL]
        if len(variants) == 1:
            return {**variants[0], **{k: v for k, v in node.items() if k != "anyOf"}}
        node["anyOf"] = variants
    return node


def admits_null(node: dict, root: dict) -> bool:
    node = deref(node, root)
    return node.get("type") == "null" or any(v == NULL for v in node.get("anyOf", []))


def walk(node: Any):
    """Every schema node (not the name-keyed ``properties`` and ``$defs`` maps themselves)."""
    if not isinstance(node, dict):
        return
    yield node
    for key in ("properties", "$defs"):
        for sub in node.get(key, {}).values():
            yield from walk(sub)
    for key in ("items", "additionalProperties"):
        yield from walk(node.get(key))
    for sub in node.get("anyOf", []):
        yield from walk(sub)


def objects(raw: dict, ours: dict, sdk: dict):
    """The same object schema in pydantic's, our and the SDK's schema: root, then $defs."""
    yield raw, ours, sdk
    for name, sub in raw.get("$defs", {}).items():
        if "properties" in sub:
            yield sub, ours["$defs"][name], sdk["$defs"][name]


@pytest.mark.parametrize("model", MODELS, ids=ids)
def test_strict_schema_is_the_sdks_but_for_nullable_defaults(model):
    ours = strict_parameters_schema(model)
    sdk = clean_parameters(to_strict_json_schema(model))
    assert without_null(deref(ours, ours)) == without_null(deref(sdk, sdk))


@pytest.mark.parametrize("model", MODELS, ids=ids)
def test_exactly_the_properties_with_a_default_become_nullable(model):
    ours = strict_parameters_schema(model)
    sdk = clean_parameters(to_strict_json_schema(model))
    for raw, our_object, sdk_object in objects(model.model_json_schema(), ours, sdk):
        for name, prop in our_object["properties"].items():
            if name not in raw.get("required", []) and "const" not in prop:
                assert admits_null(prop, ours), f"{model.__name__}.{name} has a default"
            else:
                assert admits_null(prop, ours) == admits_null(sdk_object["properties"][name], sdk)


@pytest.mark.parametrize("model", MODELS, ids=ids)
def test_the_sdks_strict_transform_leaves_ours_unchanged(model):
    ours = strict_parameters_schema(model)
    again = copy.deepcopy(ours)
    assert _ensure_strict_json_schema(again, path=(), root=again) == ours


@pytest.mark.parametrize("model", MODELS, ids=ids)
def test_strict_invariants(model):
    ours = strict_parameters_schema(model)
    assert ours["type"] == "object" and "description" not in ours
    for node in walk(ours):
        assert "default" not in node and "title" not in node
        assert "$ref" not in node or len(node) == 1, f"a $ref with siblings: {node}"
        if "properties" in node:
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])
        if node.get("type") == "object":
            assert "additionalProperties" in node


def test_nullable_forms_follow_pydantics_x_or_none():
    defaults = strict_parameters_schema(Defaults)["properties"]
    assert defaults["count"] == {
        "description": "How many",
        "anyOf": [{"type": "integer", "minimum": 1, "maximum": 10}, NULL],
    }
    assert defaults["either"] == {"anyOf": [{"type": "integer"}, {"type": "string"}, NULL]}
    enums = strict_parameters_schema(Enums)["properties"]
    assert enums["mode"] == {"anyOf": [{"type": "string", "enum": ["fast", "cheap"]}, NULL]}
    assert enums["accent"] == {"anyOf": [{"$ref": "#/$defs/Color"}, NULL]}
    assert enums["color"] == {"$ref": "#/$defs/Color"}
    optionals = strict_parameters_schema(Optionals)
    assert optionals["properties"]["note"] == {"anyOf": [{"type": "string"}, NULL]}
    assert optionals["required"] == ["note", "maybe_required", "label"]


def test_a_ref_with_a_description_is_inlined_and_a_tag_stays_a_constant():
    nested = strict_parameters_schema(Nested)["properties"]
    home = nested["home"]
    assert home["description"] == "Where they live" and home["type"] == "object"
    assert home["required"] == ["street", "zip_code", "country"]
    assert home["properties"]["country"] == {"anyOf": [{"type": "string"}, NULL]}
    assert nested["work"] == {"anyOf": [{"$ref": "#/$defs/Address"}, NULL]}
    cat = strict_parameters_schema(Union)["$defs"]["Cat"]
    assert cat["properties"]["kind"] == {"type": "string", "const": "cat"}
    assert cat["required"] == ["kind", "lives"]


def test_the_agents_form_is_unchanged_by_strictness():
    params = next(
        v
        for v in vars(handlers.examples).values()
        if isinstance(v, Tool) and v.name == "get_weather"
    ).definition()["parameters"]
    assert params["required"] == ["city"]
    assert params["properties"]["unit"] == {"type": "string", "enum": ["celsius", "fahrenheit"]}
