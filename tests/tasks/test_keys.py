"""Key spelling: distinct ids always give distinct keys, and plain ids keep their old keys."""

from urllib.parse import unquote_to_bytes

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks import keys

#: Every code point, lone surrogates included (JSON can carry them as escapes).
ANY_TEXT = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF))
SEPARATORS = st.text(st.sampled_from(list(":{}%~\n\t /\\*?[]x")), max_size=12)
IDS = st.one_of(ANY_TEXT, SEPARATORS, st.text(max_size=3), st.just("x" * 10_000))


def test_colliding_shapes_of_earlier_versions_are_distinct():
    assert keys.call("s", "t:x", "c") != keys.call("s", "t", "x:c")
    assert keys.call("a}:x", "t", "c") != keys.call("a", "x}:t", "c")
    assert keys.claim("a}:x") != keys.claim("a")
    assert keys.call("s", "", "c") != keys.call("s", "c", "")


def test_plain_ids_are_spelled_as_themselves_so_old_records_stay_readable():
    assert keys.call("sess_1", "turn-2", "call.3") == "toolfan:call:{sess_1}:turn-2:call.3"
    assert keys.claim("sess_1") == "toolfan:claim:{sess_1}"
    assert keys.dispatch("sess_1") == "toolfan:dispatch:{sess_1}"


@settings(max_examples=400, deadline=None)
@given(IDS, IDS, IDS, IDS, IDS, IDS)
def test_distinct_ids_give_distinct_keys(s1, t1, c1, s2, t2, c2):
    same_ids = (s1, t1, c1) == (s2, t2, c2)
    assert (keys.call(s1, t1, c1) == keys.call(s2, t2, c2)) == same_ids
    assert (keys.claim(s1) == keys.claim(s2)) == (s1 == s2)
    assert (keys.dispatch(s1) == keys.dispatch(s2)) == (s1 == s2)


@settings(max_examples=400, deadline=None)
@given(IDS)
def test_spelling_is_safe_bounded_and_decodes_back(value):
    spelled = keys.encode_id(value)
    assert not set(spelled) & set(":{}*?[]\\ \n")
    assert spelled.isascii()
    assert len(spelled) <= keys.LONG + 65
    if "~" not in spelled:
        assert unquote_to_bytes(spelled) == value.encode("utf-8", "surrogatepass")
    tag = keys.claim(value)[len("toolfan:claim:") :]
    assert tag.startswith("{") and tag.endswith("}") and tag.count("}") == 1


@settings(max_examples=200, deadline=None)
@given(IDS, IDS, IDS)
def test_a_session_pattern_matches_its_calls_and_names_its_session(s, t, c):
    key = keys.call(s, t, c)
    assert key.startswith(keys.calls_of(s)[:-1])
    assert keys.dispatch_of_claim(keys.claim(s)) == keys.dispatch(s)
    short = "~" not in keys.encode_id(s)
    if short and s.encode("utf-8", "surrogatepass") == s.encode("utf-8", "replace"):
        assert keys.session_of(key) == s
