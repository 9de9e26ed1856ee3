"""Session pages and required actions from a hostile API: read without ever raising.

A listed entry is a Session or a BadSession, an action a FunctionCall or an OpaqueAction,
whatever the JSON holds; a listing always ends, whatever the cursor does.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.listing import ListBudget, Listing
from dispatcher.models import (
    BadSession,
    FunctionCall,
    OpaqueAction,
    Session,
    parse_action,
    parse_session,
)
from handlers import jsonsafe

pytestmark = pytest.mark.slow  # over 5 s: make test-fast leaves it out

ANY_TEXT = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF))
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=25,
)
FIELDS = ("id", "status", "required_actions", "metadata", "created_at", "agent", "error")
SESSIONS = st.dictionaries(st.sampled_from(FIELDS) | ANY_TEXT, JSON_VALUES, max_size=8)


def call(**fields: object) -> dict:
    return {"type": "function_call", "turn_id": "t", "call_id": "c", "name": "f", **fields}


@settings(max_examples=500, deadline=None)
@given(st.one_of(JSON_VALUES, SESSIONS))
def test_any_listed_entry_reads_as_a_session_or_a_bad_one(raw):
    parsed = parse_session(raw)
    assert isinstance(parsed, Session | BadSession)
    if isinstance(parsed, Session):
        assert isinstance(parsed.id, str) and parsed.id not in ("", ".", "..")
        assert all(isinstance(v, str) for v in parsed.metadata.values())
        assert all(isinstance(a, FunctionCall | OpaqueAction) for a in parsed.required_actions)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(ANY_TEXT, JSON_VALUES, max_size=5), JSON_VALUES)
def test_a_function_call_with_usable_ids_is_kept_whatever_else_it_holds(junk, arguments):
    entry = {**junk, **call(arguments=arguments)}
    parsed = parse_action(entry)
    assert isinstance(parsed, FunctionCall)
    assert (parsed.turn_id, parsed.call_id) == ("t", "c")


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_any_action_reads_without_raising(raw):
    assert isinstance(parse_action(raw), FunctionCall | OpaqueAction)


def test_bad_fields_cost_the_session_only_when_they_decide_what_to_do():
    good = {"id": "s", "required_actions": [call()]}
    for field, value in [
        ("created_at", jsonsafe.Unreadable("a number with 5,000 digits")),
        ("metadata", {"team": 5, "env": "x"}),
        ("agent", "not an object"),
        ("status", 7),
        ("error", {"deep": []}),
    ]:
        parsed = parse_session({**good, field: value})
        assert isinstance(parsed, Session), field
        assert [c.call_id for c in parsed.function_calls] == ["c"]
    assert parse_session({**good, "metadata": {"team": 5, "env": "x"}}).metadata == {"env": "x"}
    for bad in ({**good, "id": 5}, {**good, "id": ".."}, {**good, "required_actions": {}}):
        assert isinstance(parse_session(bad), BadSession)


def test_a_call_with_an_unusable_name_is_still_answerable():
    for name in (None, 5, [], {"x": 1}):
        parsed = parse_action(call(name=name))
        assert isinstance(parsed, FunctionCall) and parsed.name == ""
    for ids in ({"turn_id": ""}, {"call_id": 5}, {"turn_id": None}):
        assert isinstance(parse_action(call(**ids)), OpaqueAction)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(SESSIONS, max_size=3), st.booleans()), min_size=1, max_size=6))
def test_a_listing_always_ends_whatever_the_pages_say(pages):
    served = iter(pages)

    def fetch(params):
        data, has_more = next(served, ([], False))
        return data, has_more

    listing = Listing(fetch, [], ListBudget(max_pages=4), None)
    items = list(listing)
    assert all(isinstance(i, Session | BadSession) for i in items)
    assert listing.pages <= 4


def test_a_repeated_cursor_ends_the_listing_and_says_so():
    page = ([{"id": "a", "required_actions": []}, {"id": "b", "required_actions": []}], True)
    listing = Listing(lambda params: page, [], ListBudget(), None)
    assert [s.id for s in listing] == ["a", "b", "a", "b"]
    assert listing.cut == "the API repeated the cursor 'b'"


def test_pages_nested_too_deep_or_holding_huge_numbers_still_read():
    deep = '{"data": [{"id": "s", "required_actions": [' + "[" * 5_000 + "]" * 5_000 + "]}]}"
    page = jsonsafe.loads(deep, max_depth=72)
    parsed = parse_session(page["data"][0])
    assert isinstance(parsed, Session) and isinstance(parsed.required_actions[0], OpaqueAction)
    big = json.dumps({"data": [{"id": "s", "created_at": 1}]}).replace("1}", "1" * 5_000 + "}")
    assert isinstance(parse_session(jsonsafe.loads(big)["data"][0]), Session)


def test_a_cursor_no_url_can_carry_falls_back_to_the_last_one_that_can():
    long_id = "\U0001f600" * 10_000  # 120 KB percent-encoded: httpx refuses such a URL
    pages = {
        None: ([{"id": "a"}, {"id": "b"}, {"id": long_id}], True),
        "b": ([{"id": long_id}, {"id": "c"}], False),
    }
    sent: list[str | None] = []

    def fetch(params):
        after = dict(params).get("after")
        sent.append(after)
        return pages[after]

    from dispatcher.models import addressable

    listing = Listing(fetch, [], ListBudget(), None, addressable)
    items = list(listing)
    assert sent == [None, "b"] and listing.cut is None
    assert [i.id for i in items] == ["a", "b", long_id, long_id, "c"]
    assert isinstance(items[2], BadSession) and "no request URL" in items[2].problem


def test_ids_no_url_can_carry_are_bad_sessions_not_requests():
    from dispatcher.client import path_segment
    from dispatcher.errors import BadRequestError

    for ident in (".", "..", "\U0001f600" * 2_000):
        assert isinstance(parse_session({"id": ident, "required_actions": []}), BadSession)
        with pytest.raises(BadRequestError):
            path_segment(ident)
    assert path_segment("a/b%\n\ud800") == "a%2Fb%25%0A%ED%A0%80"
    assert isinstance(parse_session({"id": "x" * 16_000, "required_actions": []}), Session)
