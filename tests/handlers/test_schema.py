import json
from enum import StrEnum
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from handlers import Registry, RegistryError


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str = Field(description="Street and number")
    city: str
    zip_code: str | None = None


class Order(BaseModel):
    """An order to place."""

    sku: str = Field(min_length=3, max_length=12, pattern=r"^[A-Z0-9-]+$")
    quantity: int = Field(1, ge=1, le=99)
    ship_to: Address
    gift: bool = False


def _params(reg: Registry, name: str) -> dict:
    tool = reg.get(name)
    assert tool is not None
    return tool.definition()["parameters"]


def walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


def test_signature_with_optional_fields_and_descriptions():
    reg = Registry()

    @reg.tool
    def book(
        city: Annotated[str, Field(description="Where to stay")],
        nights: int,
        breakfast: bool = False,
        note: str | None = None,
    ) -> str:
        """Book a hotel room.

        Args:
            nights: How many nights to stay.
            breakfast: Include breakfast.
        """
        return "ok"

    definition = reg.get("book").definition()
    assert list(definition) == ["type", "name", "description", "parameters", "defer_loading"]
    assert definition["description"] == "Book a hotel room."
    params = definition["parameters"]
    assert list(params["properties"]) == ["city", "nights", "breakfast", "note"]
    assert params["required"] == ["city", "nights"]
    assert params["additionalProperties"] is False
    assert params["properties"]["city"] == {"type": "string", "description": "Where to stay"}
    assert params["properties"]["nights"] == {
        "type": "integer",
        "description": "How many nights to stay.",
    }
    assert params["properties"]["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]


def test_nested_model_enums_lists_are_closed_and_stripped():
    reg = Registry()

    @reg.tool
    def place(order: Order, colors: list[Color], mode: Literal["fast", "cheap"] = "fast") -> str:
        """Place an order."""
        return "ok"

    params = _params(reg, "place")
    assert params["required"] == ["order", "colors"]
    nodes = list(walk(params))
    for node in nodes:
        assert not {"title", "default", "minLength", "maxLength"} & set(node)
        if "properties" in node:
            assert node["additionalProperties"] is False
            assert "required" in node
    defs = params["$defs"]
    assert defs["Color"] == {"type": "string", "enum": ["red", "blue"]}
    assert defs["Order"]["required"] == ["sku", "ship_to"]
    assert defs["Order"]["properties"]["sku"]["pattern"] == "^[A-Z0-9-]+$"
    assert defs["Order"]["properties"]["quantity"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 99,
    }
    assert defs["Address"]["required"] == ["street", "city"]
    assert params["properties"]["colors"] == {"type": "array", "items": {"$ref": "#/$defs/Color"}}
    assert params["properties"]["mode"] == {"type": "string", "enum": ["fast", "cheap"]}


def test_single_model_parameter_is_the_schema():
    reg = Registry()

    @reg.tool(name="order_now", description="Order it.")
    def place(order: Order) -> str:
        return order.sku

    params = _params(reg, "order_now")
    assert list(params["properties"]) == ["sku", "quantity", "ship_to", "gift"]
    assert params["required"] == ["sku", "ship_to"]
    assert reg.get("order_now").description == "Order it."


def test_key_order_is_stable_and_output_is_deterministic():
    reg = Registry()

    @reg.tool
    def f(b: int, a: Annotated[str, Field(description="A")] = "x") -> None:
        """F."""

    first = json.dumps(reg.definitions())
    assert first == json.dumps(reg.definitions())
    assert list(reg.get("f").definition()["parameters"]["properties"]["a"]) == [
        "type",
        "description",
    ]


def test_no_arguments_gives_an_empty_closed_object():
    reg = Registry()

    @reg.tool
    def ping() -> str:
        """Ping."""
        return "pong"

    assert _params(reg, "ping") == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_agent_tools_adds_tool_search_only_when_deferred():
    reg = Registry()

    @reg.tool
    def a() -> None:
        """A."""

    assert reg.agent_tools()[-1]["type"] == "function"

    @reg.tool(defer_loading=True)
    def b() -> None:
        """B."""

    tools = reg.agent_tools()
    assert tools[-1] == {"type": "tool_search"}
    assert [t.get("defer_loading") for t in tools[:-1]] == [False, True]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "bad name"}, "must match"),
        ({"queue": "bad queue"}, "queue"),
        ({"timeout": 0}, "timeout"),
        ({"max_output_chars": 10}, "max_output_chars"),
        ({"reconcile": lambda a: a}, "reconcile is for idempotent=False"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(RegistryError, match=message):
        Registry().tool(**{"name": "ok", **options})(lambda: None)


def test_untyped_and_variadic_parameters_are_refused():
    reg = Registry()
    with pytest.raises(RegistryError, match="needs a type hint"):

        @reg.tool
        def f(x) -> None:  # type: ignore[no-untyped-def]
            """F."""

    with pytest.raises(RegistryError, match=r"\*args"):

        @reg.tool
        def g(*xs: int) -> None:
            """G."""


def test_duplicate_names_are_refused_and_default_queue():
    reg = Registry()

    @reg.tool
    def same() -> None:
        """One."""

    assert reg.get("same").queue == "fn.same"
    with pytest.raises(RegistryError, match="two tools"):

        @reg.tool(name="same")
        def other() -> None:
            """Two."""


def test_tool_stays_callable_as_plain_function():
    reg = Registry()

    @reg.tool
    def double(x: int) -> int:
        """Double."""
        return 2 * x

    assert double(4) == 8
