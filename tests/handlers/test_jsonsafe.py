import contextlib
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.jsonsafe import Unreadable, check, loads

pytestmark = pytest.mark.slow  # over 5 s: make test-fast leaves it out

DIGITS = sys.get_int_max_str_digits()
ROOT = Path(__file__).resolve().parents[2]
LONGEST = 10**DIGITS - 1  # the longest integer json can still convert
# No example database: it would be a .hypothesis/ directory in the working tree.
SOME = settings(max_examples=150, deadline=None, database=None)
FEW = settings(max_examples=40, deadline=None, database=None)


def too_deep(max_depth):
    return Unreadable(f"nested deeper than {max_depth} levels")


def depth(value):
    """Levels of lists and dicts, the outermost at 1 (tests only build shallow values)."""
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def prune(value, max_depth, level=1):
    """What loads should make of ``value``: containers past ``max_depth`` cut off."""
    if not isinstance(value, list | dict):
        return value
    if level > max_depth:
        return too_deep(max_depth)
    if isinstance(value, list):
        return [prune(item, max_depth, level + 1) for item in value]
    return {key: prune(item, max_depth, level + 1) for key, item in value.items()}


def assert_same(actual, expected):
    """Equal, and of the same types, key order and float signs (``1 == 1.0 == True``)."""
    assert actual == expected
    assert json.dumps(actual, default=repr) == json.dumps(expected, default=repr)


def nested(levels, inner, key=None):
    """``inner`` wrapped in ``levels`` arrays (or objects with ``key``), built in a loop."""
    for _ in range(levels):
        inner = [inner] if key is None else {key: inner}
    return inner


def rejection(data, **options):
    """The ValueError's message if loads rejects ``data``; None if it reads it."""
    try:
        loads(data, **options)
    except ValueError as exc:
        return str(exc)
    return None


def descend(value, levels):
    for _ in range(levels):
        value = value[0] if isinstance(value, list) else next(iter(value.values()))
    return value


SPECIAL_CHARACTERS = ["\x00", "\ud800", "\udfff", "\U0001f600", '"', "\\", "[", "]", "{", "}"]
characters = st.one_of(
    st.characters(exclude_categories=()),
    st.characters(categories=["Cs"]),  # lone surrogates, rare otherwise
    st.sampled_from([*SPECIAL_CHARACTERS, "\u2028", "\ufeff", "\x1f"]),
)
texts = st.text(characters, max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-LONGEST, max_value=LONGEST),
    st.sampled_from([LONGEST, -LONGEST, 0]),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=16,
)


# --- loads: ordinary documents ------------------------------------------------------------


@SOME
@given(json_values, st.integers(0, 2))
def test_documents_within_the_limit_read_exactly_like_json_loads(value, spare):
    max_depth = max(1, depth(value) + spare)
    for ensure_ascii in (True, False):
        text = json.dumps(value, ensure_ascii=ensure_ascii)
        assert_same(loads(text, max_depth=max_depth), json.loads(text))
    data = json.dumps(value).encode()  # ensure_ascii: lone surrogates stay \u escapes
    assert_same(loads(data, max_depth=max_depth), json.loads(data))
    assert check(value, max_depth=max_depth) is None
    assert check(json.loads(data), max_depth=max_depth) is None


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud800"',
        '["\\udfff\\ud800", "\\u0000", "\\ud83d\\ude00", "é\\n\\t\\"\\\\\\/"]',
        '{"a": 1, "a": 2, "b": {"c": [], "c": {}}}',
        '  {"": [true, false, null, -0, -0.0, 1E5, 2e-3, 1.5e+300]}\r\n',
        '"[\\"{\\\\"',
    ],
)
def test_edge_cases_of_ordinary_documents(text):
    assert_same(loads(text), json.loads(text))
    assert_same(loads(text.encode()), json.loads(text))
    # The same document in the slower reader: it must give the same values.
    deep = "[" * 80 + text + "]" * 80
    assert_same(descend(loads(deep, max_depth=100), 80), json.loads(text))


def test_depth_counts_containers_from_one():
    assert loads("[[1]]", max_depth=1) == [too_deep(1)]
    assert loads("[[1]]", max_depth=2) == [[1]]
    assert loads("1", max_depth=1) == 1
    assert loads('{"a": {"b": []}, "c": [1]}', max_depth=2) == {"a": {"b": too_deep(2)}, "c": [1]}


# --- loads: too deep ----------------------------------------------------------------------

levels = st.tuples(
    st.one_of(st.none(), texts),  # None: an array, else an object with this key
    st.lists(json_values, max_size=2),  # siblings before
    st.lists(json_values, max_size=2),  # siblings after
)


def wrap(value, wrappers):
    for key, before, after in wrappers:
        if key is None:
            value = [*before, value, *after]
        else:
            members = {f"b{i}": v for i, v in enumerate(before)}
            members[key] = value
            members.update({f"a{i}": v for i, v in enumerate(after)})
            value = members
    return value


@SOME
@given(json_values, st.lists(levels, min_size=1, max_size=6), st.data())
def test_containers_past_the_limit_become_unreadable_and_nothing_else_changes(
    value, wrappers, data
):
    document = wrap(value, wrappers)
    max_depth = data.draw(st.integers(1, depth(document) + 1), label="max_depth")
    text = json.dumps(document, ensure_ascii=data.draw(st.booleans(), label="ensure_ascii"))
    expected = prune(json.loads(text), max_depth)
    assert_same(loads(text, max_depth=max_depth), expected)
    assert_same(loads(json.dumps(document).encode(), max_depth=max_depth), expected)
    reason = check(json.loads(text), max_depth=max_depth)
    assert reason == (None if depth(document) <= max_depth else too_deep(max_depth).reason)


@FEW
@given(
    json_values,
    st.integers(150, 400),
    st.one_of(st.none(), texts),
    st.sampled_from([1, 64, 199, 200, 201, 1000]),
)
def test_deep_documents_read_past_the_fast_parser(value, levels, key, max_depth):
    document = nested(levels, value, key)
    text = json.dumps(document)
    assert_same(loads(text, max_depth=max_depth), prune(json.loads(text), max_depth))


@pytest.mark.parametrize(
    "string",  # as written inside the quotes of a JSON string
    ["]]]]}}", r"\\", r"\"]]", r"\\\"]]", r"\\\\", "[[{{", r"\"\"", r"\u005d", r"]\\"],
)
def test_brackets_and_escapes_in_strings_do_not_hide_the_depth(string):
    # A string in every level: the pre-scan must not count its brackets (or miss real ones).
    text = ('["' + string + '", ') * 70 + "0" + "]" * 70
    for max_depth in (64, 69, 70, 71):
        assert_same(loads(text, max_depth=max_depth), prune(json.loads(text), max_depth))
        assert_same(loads(text.encode(), max_depth=max_depth), prune(json.loads(text), max_depth))


@pytest.mark.parametrize("as_bytes", [False, True])
@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ('{"k": ', "}"), ('[{"k":', "}]")])
def test_documents_5000_deep(as_bytes, opening, closing):
    text = '{"before": 1, "deep": ' + opening * 5000 + "0" + closing * 5000 + ', "after": [2]}'
    document = loads(text.encode() if as_bytes else text)
    assert document["before"] == 1
    assert document["after"] == [2]
    chain = document["deep"]
    assert descend(chain, 63) == too_deep(64)  # the page's own object is level 1


def test_a_flood_of_brackets_is_read_without_recursion_in_seconds():
    started = time.perf_counter()
    with pytest.raises(ValueError, match="Expecting value"):
        loads("[" * 10_000_000)
    assert descend(loads("[" * 5_000_000 + "]" * 5_000_000), 64) == too_deep(64)
    assert rejection(b"[" * 5_000_000 + b"]" * 4_999_999)
    assert rejection("[" * 5_000_000 + "}" + "]" * 5_000_000)
    assert time.perf_counter() - started < 10


def test_a_deep_call_stack_does_not_make_loads_or_check_raise():
    # Shallow enough for json's own parser and encoder, but not with 40 frames left.
    text = "[" * 150 + '[1, 2.5, {"é": null}]' + "]" * 150
    value = json.loads(text)
    size = compact_size(value)

    def frames():
        count, frame = 0, sys._getframe()
        while frame is not None:
            count, frame = count + 1, frame.f_back
        return count

    def with_frames_left(levels):
        if levels:
            return with_frames_left(levels - 1)
        return loads(text, max_depth=1000), check(value, max_depth=1000, max_bytes=size - 1)

    document, reason = with_frames_left(sys.getrecursionlimit() - frames() - 40)
    assert_same(document, value)
    assert reason == f"{size:,} bytes (at most {size - 1:,})"


# --- loads: numbers -----------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "[" * 100])
def test_a_5000_digit_integer_costs_only_itself(prefix):
    huge = "9" * 5000
    text = (
        prefix + '{"a": [1, ' + huge + ", -" + huge + ', {"b": "x"}], "c": 1.5}' + "]" * len(prefix)
    )
    document = descend(loads(text, max_depth=200), len(prefix))
    unreadable = Unreadable(f"a number with 5,000 digits (at most {DIGITS:,})")
    assert_same(document, {"a": [1, unreadable, unreadable, {"b": "x"}], "c": 1.5})
    assert loads(str(LONGEST)) == LONGEST


@pytest.mark.parametrize("prefix", ["", "[" * 100])
def test_nan_infinity_and_overflow_are_not_numbers(prefix):
    text = prefix + "[NaN, Infinity, -Infinity, 1e400, -1e400, 1e-400, 1.5]" + "]" * len(prefix)
    assert_same(
        descend(loads(text, max_depth=200), len(prefix)),
        [
            Unreadable("NaN is not a JSON number"),
            Unreadable("Infinity is not a JSON number"),
            Unreadable("-Infinity is not a JSON number"),
            Unreadable("a number out of range"),
            Unreadable("a number out of range"),
            0.0,
            1.5,
        ],
    )


# --- loads: not JSON ----------------------------------------------------------------------

JSONISH_TOKENS = [
    "[", "]", "{", "}", ",", ":", " ", "\n", '"a"', '"\\""', '"\\\\"', '"\\ud800"', '"[{"',
    '"\\x"', '"\n"', '"', "\\", "0", "1", "-", "-1", "01", "1.", ".5", "1.5", "1e", "2E+3",
    "true", "false", "null", "tru", "NaN", "Infinity", "-Infinity", "\ufeff", "é", "\x00",
]  # fmt: skip
jsonish = st.lists(st.sampled_from(JSONISH_TOKENS), max_size=40).map("".join)


def as_loads_reads(source):
    """json.loads' answer with NaN, infinities and overflowing floats named as loads names them."""

    def parse_float(literal: str) -> object:
        value = float(literal)
        return Unreadable("a number out of range") if math.isinf(value) else value

    return json.loads(
        source,
        parse_float=parse_float,
        parse_constant=lambda name: Unreadable(f"{name} is not a JSON number"),
    )


@settings(max_examples=400, deadline=None, database=None)
@given(jsonish, st.integers(1, 4))
def test_agrees_with_json_loads_on_what_is_and_is_not_json(text, max_depth):
    data = text.encode()
    # json.loads would take bytes starting with a NUL for UTF-16 or UTF-32.
    sources = [text, data] if json.detect_encoding(data).startswith("utf-8") else [text]
    for source in sources:
        try:
            expected = as_loads_reads(source)
        except json.JSONDecodeError:
            assert rejection(source, max_depth=max_depth)
        else:
            assert_same(loads(source, max_depth=max_depth), prune(expected, max_depth))


@SOME
@given(st.one_of(st.text(characters), jsonish, st.text()), st.sampled_from([1, 2, 64]))
def test_any_text_is_read_or_raises_value_error(text, max_depth):
    with contextlib.suppress(ValueError):
        loads(text, max_depth=max_depth)


@SOME
@given(
    st.one_of(
        st.binary(),
        jsonish.map(lambda text: text.encode("utf-8", "surrogatepass")),
        jsonish.map(lambda text: b"\xef\xbb\xbf" + text.encode("utf-8", "surrogatepass")),
    ),
    st.sampled_from([1, 2, 64]),
)
def test_any_bytes_are_read_or_raise_value_error(data, max_depth):
    with contextlib.suppress(ValueError):
        loads(data, max_depth=max_depth)


def test_a_utf8_byte_order_mark_is_skipped_in_bytes_only():
    assert loads(b'\xef\xbb\xbf{"a": ["\xc3\xa9"]}') == {"a": ["é"]}
    assert rejection('\ufeff{"a": 1}')  # as json.loads: a str has been decoded already


@pytest.mark.parametrize(
    "data",
    [b"\xff", b'["\xc3"]', b'"\xed\xa0\x80"', b'"\xc0\xaf"', b"[" * 100 + b"\x80" + b"]" * 100],
)
def test_bytes_that_are_not_utf8_raise_value_error(data):
    with pytest.raises(ValueError, match="not UTF-8"):
        loads(data)


@pytest.mark.parametrize(
    "text",
    ["[", "[1,]", '{"a"}', '{"a":1,}', "[1 2]", '"abc', "[}", "1 2", "[01]", "nul"],
)
@pytest.mark.parametrize("prefix", ["", "[" * 100])
def test_syntax_errors_raise_value_error(text, prefix):
    assert rejection(prefix + text + "]" * len(prefix))


def test_empty_documents_raise_value_error():
    assert rejection("")
    assert rejection(" \n")
    assert rejection(b"\xef\xbb\xbf")


def test_programming_errors_are_value_errors_too():
    for max_depth in (0, -1):
        with pytest.raises(ValueError, match="max_depth"):
            loads("[]", max_depth=max_depth)
        with pytest.raises(ValueError, match="max_depth"):
            check([], max_depth=max_depth)
    with pytest.raises(ValueError, match="max_bytes"):
        check([], max_depth=1, max_bytes=-1)
    with pytest.raises(ValueError, match="str or bytes"):
        loads(None)  # type: ignore[arg-type]


# --- check --------------------------------------------------------------------------------

TOO_MANY_DIGITS = f"a number with {DIGITS + 1:,} digits (at most {DIGITS:,})"
#: Name (hypothesis shows it; no repr() of a huge int) -> (make the value, check's reason).
PROBLEMS = {
    "unreadable": (lambda: Unreadable("planted"), "planted"),
    "nan": (lambda: float("nan"), "a number out of range"),
    "inf": (lambda: float("inf"), "a number out of range"),
    "-inf": (lambda: float("-inf"), "a number out of range"),
    "set": (lambda: {1, 2}, "not a JSON value: set"),
    "object": (object, "not a JSON value: object"),
    "tuple": (lambda: (1, 2), "not a JSON value: tuple"),
    "bytes": (lambda: b"x", "not a JSON value: bytes"),
    "int key": (lambda: {1: "a"}, "not a JSON value: a dict key of type int"),
    "None key": (lambda: {None: "a"}, "not a JSON value: a dict key of type NoneType"),
    "huge int": (lambda: 10**DIGITS, TOO_MANY_DIGITS),
    "huge negative int": (lambda: -(10**DIGITS), TOO_MANY_DIGITS),
}


def containers(value, level=1):
    """Every list and dict in ``value`` with its depth."""
    if isinstance(value, list | dict):
        yield value, level
        for item in value if isinstance(value, list) else value.values():
            yield from containers(item, level + 1)


def plant(container, problem, data):
    if isinstance(container, list):
        container.insert(data.draw(st.integers(0, len(container)), label="index"), problem)
    else:
        container["planted here"] = problem


@SOME
@given(json_values, st.sampled_from(sorted(PROBLEMS)), st.data())
def test_check_finds_a_planted_problem(value, problem, data):
    document = [value]
    target, _ = data.draw(st.sampled_from(list(containers(document))), label="target")
    make, reason = PROBLEMS[problem]
    plant(target, make(), data)
    assert check(document, max_depth=depth(document) + 1) == reason
    assert check(document, max_depth=depth(document) + 1, max_bytes=10) == reason


@SOME
@given(json_values, st.integers(0, 3), st.data())
def test_check_finds_planted_deep_nesting(value, spare, data):
    document = [value]
    max_depth = depth(document) + spare
    target, level = data.draw(st.sampled_from(list(containers(document))), label="target")
    plant(target, nested(max_depth - level + 1, None), data)  # one level too many
    assert check(document, max_depth=max_depth) == too_deep(max_depth).reason


def compact_size(value):
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


@SOME
@given(json_values)
def test_check_measures_the_compact_utf8_encoding(value):
    size = compact_size(value)
    max_depth = max(1, depth(value))
    assert check(value, max_depth=max_depth, max_bytes=size) is None
    assert check(value, max_depth=max_depth, max_bytes=size - 1) == (
        f"{size:,} bytes (at most {size - 1:,})"
    )


def test_check_measures_values_too_deep_for_json_dumps():
    value = nested(300, ["é", "\ud800", {"k": 1.5}])  # past the C encoder's safe depth
    size = compact_size(value)
    assert check(value, max_depth=1000, max_bytes=size) is None
    assert (
        check(value, max_depth=1000, max_bytes=size - 1) == f"{size:,} bytes (at most {size - 1:,})"
    )


def reference_problem(value, max_depth, level=0):
    """Whether ``value`` breaks any of check's rules, written the obvious recursive way."""
    if isinstance(value, list | dict):
        if level + 1 > max_depth:
            return True
        if isinstance(value, dict) and not all(isinstance(key, str) for key in value):
            return True
        items = value if isinstance(value, list) else value.values()
        return any(reference_problem(item, max_depth, level + 1) for item in items)
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            str(value)
        except ValueError:
            return True
        return False
    return not (value is None or isinstance(value, str | bool))


anything = st.recursive(
    st.one_of(
        scalars,
        st.floats(),
        st.binary(max_size=3),
        st.complex_numbers(),
        st.builds(object),
        st.builds(Unreadable, texts),
        st.sets(st.integers(), max_size=2),
        st.sampled_from([1, -1]).map(lambda sign: sign * 10**DIGITS),  # no repr() of it
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children),
        st.dictionaries(
            st.one_of(texts, st.integers(), st.none(), st.floats()), children, max_size=3
        ),
    ),
    max_leaves=12,
)


@SOME
@given(anything, st.integers(1, 4), st.one_of(st.none(), st.integers(0, 300)))
def test_check_never_raises_and_follows_the_rules(value, max_depth, max_bytes):
    reason = check(value, max_depth=max_depth, max_bytes=max_bytes)
    assert reason is None or isinstance(reason, str)
    broken = reference_problem(value, max_depth)
    if max_bytes is not None and not broken:
        broken = compact_size(value) > max_bytes
    assert (reason is not None) == broken


def test_check_walks_a_list_nested_100000_deep():
    value = nested(100_000, "x")
    assert check(value, max_depth=64) == too_deep(64).reason
    assert check(value, max_depth=100_000) is None
    assert check(value, max_depth=99_999) == too_deep(99_999).reason
    size = 2 * 100_000 + 3
    assert check(value, max_depth=100_000, max_bytes=size) is None
    assert check(value, max_depth=100_000, max_bytes=10) == f"{size:,} bytes (at most 10)"
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert check(cyclic, max_depth=64) == too_deep(64).reason


def test_check_names_the_shallowest_problem():
    value = {"deep": [[[[float("nan")]]]], "top": {1, 2}}
    assert check(value, max_depth=10) == "not a JSON value: set"
    assert check(loads("[[[[1]]], NaN]"), max_depth=10) == "NaN is not a JSON number"


def test_the_module_stays_free_of_celery_httpx_and_redis():
    code = (
        "import sys, handlers.jsonsafe; "
        "print([m for m in ('celery', 'httpx', 'redis', 'kombu') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
