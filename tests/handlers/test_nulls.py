"""A ``null`` for an argument with a default means the default, where None is not valid.

Strict schemas make such arguments required but nullable, so the model sends ``null`` to
leave one at its default; a ``null`` the type accepts stays None, and one for a required
argument still fails.
"""

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from handlers import Registry
from handlers.tool import InvalidArguments


class Event(BaseModel):
    title: str
    duration: int = 30
    room: str | None = "main"


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


A_CAT = Cat()


class Place(BaseModel):
    name: str
    event: Event = Event(title="default event")


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    @reg.tool
    def plain(
        a: int,
        n: int = 5,
        s: str | None = "x",
        unit: Literal["c", "f"] = "c",
        either: int | str = 7,
    ) -> str:
        """Top-level defaults."""
        return "ok"

    @reg.tool
    def nested(
        event: Event,
        events: list[Event] = [],  # noqa: B006 - pydantic copies it
        pet: Annotated[Cat | Dog, Field(discriminator="kind")] = A_CAT,
        place: Place | None = None,
        xs: list[int] = [],  # noqa: B006
    ) -> str:
        """Nested models."""
        return "ok"

    @reg.tool
    def single(event: Event) -> str:
        """One model parameter: its fields are the arguments."""
        return event.title

    return reg


def parse(reg: Registry, name: str, arguments) -> BaseModel:
    tool = reg.get(name)
    assert tool is not None
    return tool.parse(arguments)


def test_a_null_for_an_int_with_a_default_is_the_default(reg):
    assert parse(reg, "plain", {"a": 1, "n": None}).n == 5
    assert parse(reg, "plain", '{"a": 1, "n": null, "unit": null, "either": null}').unit == "c"
    args = parse(reg, "plain", {"a": 1, "n": None, "unit": None, "either": None})
    assert (args.n, args.unit, args.either) == (5, "c", 7)


def test_a_null_where_none_is_valid_stays_none(reg):
    assert parse(reg, "plain", {"a": 1, "s": None}).s is None
    assert parse(reg, "nested", {"event": {"title": "t", "room": None}}).event.room is None


def test_a_null_for_a_required_argument_is_still_an_error(reg):
    with pytest.raises(InvalidArguments, match=r"^a: Input should be a valid integer$"):
        parse(reg, "plain", {"a": None, "n": None})
    with pytest.raises(InvalidArguments, match=r"event\.title: Input should be a valid string"):
        parse(reg, "nested", {"event": {"title": None}})


def test_other_errors_are_reported_without_the_nulls(reg):
    with pytest.raises(InvalidArguments) as caught:
        parse(reg, "plain", {"a": "x", "n": None, "unit": "kelvin"})
    assert str(caught.value) == (
        "a: Input should be a valid integer, unable to parse string as an integer; "
        "unit: Input should be 'c' or 'f'"
    )


def test_the_callers_arguments_are_not_changed(reg):
    arguments = {"a": 1, "n": None, "event": None}
    with pytest.raises(InvalidArguments, match="event: Extra inputs"):
        parse(reg, "plain", arguments)
    assert arguments == {"a": 1, "n": None, "event": None}
    nested = {"event": {"title": "t", "duration": None}}
    assert parse(reg, "nested", nested).event.duration == 30
    assert nested == {"event": {"title": "t", "duration": None}}


def test_nested_models_lists_and_unions(reg):
    args = parse(
        reg,
        "nested",
        {
            "event": {"title": "t", "duration": None},
            "events": [{"title": "a"}, {"title": "b", "duration": None}],
            "pet": {"kind": "cat", "lives": None},
            "place": {"name": "p", "event": None},
        },
    )
    assert args.event.duration == 30
    assert [e.duration for e in args.events] == [30, 30]
    assert args.pet == Cat(lives=9)
    assert args.place.event.title == "default event"
    assert parse(reg, "nested", {"event": {"title": "t"}, "events": None, "pet": None}).pet == Cat()


def test_a_null_list_item_has_no_default(reg):
    with pytest.raises(InvalidArguments, match=r"^xs\.1: Input should be a valid integer$"):
        parse(reg, "nested", {"event": {"title": "t"}, "xs": [1, None]})


def test_a_single_model_parameter_reads_nulls_the_same(reg):
    assert parse(reg, "single", {"title": "t", "duration": None}).duration == 30
