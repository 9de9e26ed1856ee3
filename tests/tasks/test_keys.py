"""Key spelling: distinct (source, ids) always give distinct keys; legacy keys map 1:1."""

import hashlib
from urllib.parse import quote_from_bytes, unquote_to_bytes

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks import keys

#: Every code point, lone surrogates included (JSON can carry them as escapes).
ANY_TEXT = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF))
SEPARATORS = st.text(st.sampled_from(list(":{}%~\n\t /\\*?[]x")), max_size=12)
IDS = st.one_of(ANY_TEXT, SEPARATORS, st.text(max_size=3), st.just("x" * 10_000))


A = "agents"


def test_colliding_shapes_of_earlier_versions_are_distinct():
    assert keys.call(A, "s", "t:x", "c") != keys.call(A, "s", "t", "x:c")
    assert keys.call(A, "a}:x", "t", "c") != keys.call(A, "a", "x}:t", "c")
    assert keys.claim(A, "a}:x") != keys.claim(A, "a")
    assert keys.call(A, "s", "", "c") != keys.call(A, "s", "c", "")


def test_keys_carry_the_source_and_the_layout_version():
    assert (
        keys.call(A, "sess_1", "turn-2", "call.3")
        == "toolfan:v2:agents:call:{sess_1}:turn-2:call.3"
    )
    assert keys.claim(A, "sess_1") == "toolfan:v2:agents:claim:{sess_1}"
    assert keys.dispatch(A, "sess_1") == "toolfan:v2:agents:dispatch:{sess_1}"
    assert keys.claim("assistants", "sess_1") != keys.claim(A, "sess_1")
    assert keys.source_of(keys.claim("odd:source", "x")) == "odd:source"


def test_a_legacy_key_moves_to_the_same_batch_in_the_same_slot():
    legacy = "toolfan:call:{sess_1}:turn-2:call.3"
    assert keys.upgraded(legacy, A) == keys.call(A, "sess_1", "turn-2", "call.3")
    assert keys.upgraded("toolfan:claim:{a%3Ab}", A) == keys.claim(A, "a:b")
    assert keys.upgraded("toolfan:dispatch:{sess_1}", A) == keys.dispatch(A, "sess_1")


@settings(max_examples=400, deadline=None)
@given(IDS, IDS, IDS, IDS, IDS, IDS, st.sampled_from([A, "assistants", "a:b"]))
def test_distinct_ids_give_distinct_keys(s1, t1, c1, s2, t2, c2, other):
    same_ids = (s1, t1, c1) == (s2, t2, c2)
    assert (keys.call(A, s1, t1, c1) == keys.call(A, s2, t2, c2)) == same_ids
    assert (keys.call(A, s1, t1, c1) == keys.call(other, s1, t1, c1)) == (other == A)
    assert (keys.claim(A, s1) == keys.claim(A, s2)) == (s1 == s2)
    assert (keys.dispatch(A, s1) == keys.dispatch(A, s2)) == (s1 == s2)


@settings(max_examples=400, deadline=None)
@given(IDS)
def test_spelling_is_safe_bounded_and_decodes_back(value):
    spelled = keys.encode_id(value)
    assert not set(spelled) & set(":{}*?[]\\ \n")
    assert spelled.isascii()
    assert len(spelled) <= keys.LONG + 65
    if "~" not in spelled:
        assert unquote_to_bytes(spelled) == value.encode("utf-8", "surrogatepass")
    tag = keys.claim(A, value)[len("toolfan:v2:agents:claim:") :]
    assert tag.startswith("{") and tag.endswith("}") and tag.count("}") == 1


@settings(max_examples=200, deadline=None)
@given(IDS, IDS, IDS)
def test_a_batch_pattern_matches_its_calls_and_names_its_batch(s, t, c):
    key = keys.call(A, s, t, c)
    assert key.startswith(keys.calls_of(A, s)[:-1])
    assert key.startswith(keys.all_calls(A)[:-1])
    assert keys.dispatch_of_claim(keys.claim(A, s)) == keys.dispatch(A, s)
    assert keys.source_of(key) == A
    short = "~" not in keys.encode_id(s)
    if short and s.encode("utf-8", "surrogatepass") == s.encode("utf-8", "replace"):
        assert keys.batch_of(key) == s


@settings(max_examples=400, deadline=None)
@given(IDS)
def test_spelling_is_the_percent_encoding_earlier_versions_wrote(value):
    raw = value.encode("utf-8", "surrogatepass")
    plain = keys._PLAIN.fullmatch(value) is not None
    written = value if plain else quote_from_bytes(raw, safe="").replace("~", "%7E")
    if len(written) > keys.LONG:
        written = f"{written[:64]}~{hashlib.sha256(raw).hexdigest()}"
    assert keys.encode_id(value) == written
    assert keys.encode_id(value) == written  # a second time, from the kept spellings
