"""Batch bodies: ordered, within the size limit, and keyed by exactly what they hold."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.sources.agents_batch import batch_key, build_body

ANY_TEXT = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF))


def result(turn: str, call: str, output: object = "ok", success: bool = True) -> dict:
    base = {"session_id": "s", "turn_id": turn, "call_id": call, "name": "f", "success": success}
    if success:
        return {**base, "outcome": "ok", "output": output}
    return {**base, "outcome": "tool_error", "error": output}


def events(body: bytes) -> list[dict]:
    return json.loads(body)["events"]


def test_events_are_sorted_so_the_same_results_make_the_same_body():
    results = [result("t2", "a"), result("t1", "b"), result("t1", "a")]
    order, body = build_body(results, 1 << 20)
    assert order == [("t1", "a"), ("t1", "b"), ("t2", "a")]
    assert build_body(results[::-1], 1 << 20) == (order, body)


def test_a_batch_over_the_limit_cuts_only_its_largest_outputs():
    results = [result("t", f"small{i}", "tiny") for i in range(10)]
    results += [result("t", "big1", "x" * 400_000), result("t", "big2", "y" * 300_000)]
    order, body = build_body(results, 200_000)
    assert len(body) <= 200_000
    sent = {(e["turn_id"], e["call_id"]): e for e in events(body)}
    assert all(sent[("t", f"small{i}")]["output"] == "tiny" for i in range(10))
    for name, char in (("big1", "x"), ("big2", "y")):
        cut = sent[("t", name)]
        assert cut["success"] is True
        assert cut["output"].startswith(char * 1000) and "size limit" in cut["output"]
    assert len(order) == 12


def test_content_arrays_that_do_not_fit_become_errors_saying_so():
    parts = [{"type": "input_image", "image_url": "data:image/png;base64," + "A" * 300_000}]
    results = [result("t", "img", parts), result("t", "ok", "fine")]
    _, body = build_body(results, 100_000)
    assert len(body) <= 100_000
    sent = {e["call_id"]: e for e in events(body)}
    assert sent["ok"]["output"] == "fine"
    assert sent["img"]["success"] is False
    assert "TOOLFAN_MAX_BATCH_BYTES" in sent["img"]["error"]


def test_a_batch_within_the_limit_is_untouched():
    results = [result("t", "a", "x" * 50_000), result("t", "b", "error text", success=False)]
    _, body = build_body(results, 1 << 20)
    assert [e.get("output", e.get("error")) for e in events(body)] == ["x" * 50_000, "error text"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(ANY_TEXT, ANY_TEXT, ANY_TEXT), min_size=1, max_size=4, unique_by=lambda r: r[:2]
    ),
    st.integers(min_value=20_000, max_value=200_000),
)
def test_any_results_fit_and_survive_the_trip(rows, limit):
    results = [result(t, c, out) for t, c, out in rows]
    order, body = build_body(results, limit)
    assert len(body) <= limit
    body.decode("ascii")  # lone surrogates and all travel as escapes
    assert sorted(order) == sorted((t, c) for t, c, _ in rows)
    assert [(e["turn_id"], e["call_id"]) for e in events(body)] == order


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, ANY_TEXT, ANY_TEXT, ANY_TEXT)
def test_distinct_sessions_or_bodies_give_distinct_keys(s1, s2, out1, out2):
    b1 = build_body([result("t", "c", out1)], 1 << 20)[1]
    b2 = build_body([result("t", "c", out2)], 1 << 20)[1]
    same = (s1, b1) == (s2, b2)
    assert (batch_key(s1, b1) == batch_key(s2, b2)) == same
    assert batch_key(s1, b1).startswith("toolfan-") and len(batch_key(s1, b1)) == 48


def test_separators_in_ids_cannot_forge_another_batch_key():
    # "c\\nu\\td" in one call, and ("c"), ("u", "d") elsewhere: the old key's inputs collided.
    one = build_body([result("u", "c\nu\td")], 1 << 20)[1]
    two = build_body([result("u", "c"), result("u", "d")], 1 << 20)[1]
    assert batch_key("s", one) != batch_key("s", two)
    assert batch_key("s\n", one) != batch_key("s", b"\n" + one)
