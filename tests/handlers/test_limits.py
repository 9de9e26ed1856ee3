"""Hostile arguments and outputs: each costs its own call a clear failed result, never a crash.

Every result below must also be storable (the ledger's JSON) and sendable: one that is not
would fail far from here, in the ledger or the batch.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers import Outcome, Registry, ToolError
from handlers.limits import Limits
from handlers.result import EMPTY_ERROR, CallResult, InputText
from handlers.runner import parse_arguments, run_call

CTX = {"session_id": "s1", "turn_id": "t1", "call_id": "c1", "function": "x"}
LIMITS = Limits()
MB5 = "m" * 5_000_000
ANY_TEXT = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def reg() -> Registry:
    reg = Registry()

    @reg.tool
    def give(value: str) -> object:
        """Returns a prepared value by name."""
        return VALUES[value]()

    @reg.tool
    def fail(kind: str) -> None:
        """Raises a prepared failure by name."""
        raise FAILURES[kind]()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    return reg


def deep_list(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class EvilList(list):
    def __iter__(self):
        raise MemoryError


VALUES = {
    "surrogate": lambda: "ok\ud800 and \ud83d\ude00",
    "surrogate_part": lambda: [{"type": "input_text", "text": "a\udfff"}],
    "empty_part": lambda: [InputText(text=""), InputText(text="kept")],
    "only_empty": lambda: [{"type": "input_text", "text": ""}],
    "huge_image": lambda: [{"type": "input_image", "image_url": "data:," + MB5}],
    "empty_image": lambda: [{"type": "input_image", "image_url": ""}],
    "file_image": lambda: [{"type": "input_image", "image_url": "file:///etc/passwd"}],
    "many_parts": lambda: [{"type": "input_text", "text": "p"}] * 20_000,
    "fat_parts": lambda: [{"type": "input_text", "text": "f" * 900_000}] * 6,
    "deep": lambda: deep_list(5_000),
    "evil": lambda: EvilList([1]),
    "odd_type": lambda: [{"type": ["not", "a", "str"]}],
}
FAILURES = {
    "huge_tool_error": lambda: ToolError(MB5),
    "empty_tool_error": lambda: ToolError(""),
    "surrogate_tool_error": lambda: ToolError("no\ud800"),
    "huge_exception": lambda: ValueError(MB5),
    "unprintable": Unprintable,
    "recursion": lambda: RecursionError("deep"),
}


def run(reg: Registry, name: str, arguments) -> CallResult:
    tool = reg.get(name)
    args = parse_arguments(tool, arguments, CTX, LIMITS)
    result = args if isinstance(args, CallResult) else run_call(tool, args, CTX, LIMITS)
    assert CallResult.model_validate_json(result.stored()) == result  # storable, exactly
    return result


def test_lone_surrogates_become_replacement_characters(reg):
    assert run(reg, "give", {"value": "surrogate"}) == CallResult.ok("ok\ufffd and \U0001f600")
    result = run(reg, "give", {"value": "surrogate_part"})
    assert result.output == [InputText(text="a\ufffd")]
    assert run(reg, "fail", {"kind": "surrogate_tool_error"}).error == "no\ufffd"


def test_empty_text_parts_are_dropped_and_nothing_left_is_an_empty_string(reg):
    assert run(reg, "give", {"value": "empty_part"}).output == [InputText(text="kept")]
    assert run(reg, "give", {"value": "only_empty"}) == CallResult.ok("")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("huge_image", "image_url of 5,000,006 characters (at most 2,000,000)"),
        ("empty_image", "image_url must be an http(s) or data: URL"),
        ("file_image", "image_url must be an http(s) or data: URL"),
        ("many_parts", "a content array of 20,000 parts (at most 100)"),
        ("fat_parts", "a content array of 5,400,000 bytes (at most 4,194,304)"),
        ("deep", "Maximum serialization depth exceeded"),
    ],
)
def test_outputs_over_a_limit_fail_their_call_clearly(reg, value, message):
    result = run(reg, "give", {"value": value})
    assert result.outcome is Outcome.BAD_OUTPUT
    assert message in result.error
    assert len(result.error) <= LIMITS.error_chars


def test_an_output_that_breaks_the_serializer_is_an_exception_result(reg):
    assert run(reg, "give", {"value": "evil"}).outcome is Outcome.EXCEPTION
    assert run(reg, "give", {"value": "odd_type"}).outcome is Outcome.OK


@pytest.mark.parametrize("kind", ["huge_tool_error", "huge_exception"])
def test_huge_error_messages_are_cut_with_a_marker(reg, kind):
    error = run(reg, "fail", {"kind": kind}).error
    assert len(error) <= LIMITS.error_chars
    assert "[cut: 5,000,0" in error


def test_empty_unprintable_and_recursion_failures_still_say_something(reg):
    assert run(reg, "fail", {"kind": "empty_tool_error"}).error == EMPTY_ERROR
    unprintable = run(reg, "fail", {"kind": "unprintable"})
    assert (
        unprintable.error
        == "Function 'fail' failed: Unprintable: <unprintable Unprintable: RuntimeError>"
    )
    assert run(reg, "fail", {"kind": "recursion"}).error == (
        "Function 'fail' failed: RecursionError: deep"
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("[" * 1_000 + "]" * 1_000, "nested deeper than 64 levels"),
        ("[" * 100_000, "not valid JSON"),
        ('{"a": ' + "9" * 5_000 + ', "b": 1}', "a number with 5,000 digits"),
        ('{"a": NaN, "b": 1}', "NaN is not a JSON number"),
        ('{"a": 1, "b": 1}' + " " * 1_100_000, "bytes (at most 1,048,576)"),
        ({"a": 1, "b": 1, "k" * 5_000_000: 1}, "bytes (at most 1,048,576)"),
        ({"a": 1, "b": 1, "k" * 100_000: 1}, "Extra inputs are not permitted"),
        ({"a": deep_list(100), "b": 1}, "nested deeper than 64 levels"),
        ({"a": float("inf"), "b": 1}, "a number out of range"),
    ],
)
def test_hostile_arguments_are_refused_before_validation_with_a_clear_message(
    reg, arguments, message
):
    result = run(reg, "add", arguments)
    assert result.outcome is Outcome.INVALID_ARGUMENTS
    assert result.error.startswith("Invalid arguments for add: ")
    assert message in result.error
    assert len(result.error) <= LIMITS.error_chars


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON_VALUES, ANY_TEXT, JSON_VALUES.map(json.dumps)))
def test_any_arguments_give_a_result_never_an_exception(reg, arguments):
    result = run(reg, "add", arguments)
    assert result.outcome in (Outcome.OK, Outcome.INVALID_ARGUMENTS)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_any_returned_value_gives_a_storable_result(reg, value):
    VALUES["generated"] = lambda: value
    result = run(reg, "give", {"value": "generated"})
    assert result.outcome in (Outcome.OK, Outcome.BAD_OUTPUT)
