"""Hostile ids: separators, NUL, non-ASCII, emoji, lone surrogates, 10,000 characters, and
shapes that collide on purpose under the naive ways of joining ids into one key.

A session id, a turn id and a call id together name one call; toolfan must keep every
distinct triple apart. The families here are built so that joining the parts with ``:``,
tagging the session with ``{...}``, joining pairs with ``\\t`` and ``\\n``, cutting at a
NUL, normalizing Unicode, replacing surrogates or truncating long ids each makes two
calls look like one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

SEPARATORS = (":", "}", "{", "/", "%", "\n", "\t", " ", "\\", '"', "?", "#", "&", "+", "=", "\r")
NUL = "\x00"
NON_ASCII = ("é", "ß", "中文", "Ω", "\u200b", "\u202e", "\ufeff", "e\u0301", "ﬁ")
EMOJI = ("😀", "🔥", "👩\u200d💻", "🇫🇷")
#: Every hostile character a session id may be built from (other ASCII is harmless).
HOSTILE_CHARS: tuple[str, ...] = tuple(
    dict.fromkeys(ch for group in (SEPARATORS, (NUL,), NON_ASCII, EMOJI) for s in group for ch in s)
)
_HOSTILE = frozenset(HOSTILE_CHARS)
#: Id kinds and their weights: mostly harmless ones, so that one fatal kind in a session
#: does not hide what the others do.
ID_KINDS: dict[str, float] = {
    "plain": 30,
    "separators": 15,
    "nul": 8,
    "non_ascii": 12,
    "emoji": 10,
    "surrogate": 8,
    "long": 10,
}
LONG = 10_000
WORDS = ("t", "c", "a", "x", "turn_1", "call_1", "call", "id", "u", "d")


@dataclass(frozen=True)
class Alphabet:
    """What the emulator can address in a session id (see :mod:`tests.fuzz.probe`).

    Attributes:
        session_chars: Hostile characters a session id may hold.
        surrogates: Whether lone surrogates may appear anywhere (the emulator lists them).
        surrogate_session_ids: Whether a session id may hold one.
        session_id_length: The longest session id the emulator can address.
        excluded: Id kinds left out of this run (``--without ids=<kind>``).
    """

    session_chars: frozenset[str] = frozenset(HOSTILE_CHARS)
    surrogates: bool = True
    surrogate_session_ids: bool = True
    session_id_length: int = LONG
    excluded: frozenset[str] = frozenset()

    def id_kinds(self) -> tuple[str, ...]:
        """The id kinds this alphabet allows ("plain" always)."""
        allowed = [k for k in ID_KINDS if k not in self.excluded or k == "plain"]
        return tuple(k for k in allowed if k != "surrogate" or self.surrogates)

    def pick(self, rng: random.Random) -> str:
        """An allowed id kind, by weight."""
        kinds = self.id_kinds()
        return rng.choices(kinds, weights=[ID_KINDS[k] for k in kinds])[0]

    def session_safe(self, sid: str) -> str:
        """``sid`` with every character the emulator cannot address replaced by ``_``."""
        safe = "".join(ch if self._addressable(ch) else "_" for ch in sid)
        return safe[: self.session_id_length]

    def _addressable(self, ch: str) -> bool:
        if "\ud800" <= ch <= "\udfff":
            return self.surrogate_session_ids
        if ch in _HOSTILE:
            return ch in self.session_chars
        return ch.isprintable() or not ch.isascii()


@dataclass(frozen=True)
class CallIds:
    """The (turn, call) ids of one planned call and the family that chose them."""

    turn: str
    call: str
    label: str


@dataclass
class SessionIds:
    """A session id and the ids its calls must have; more random calls join them unless
    ``exact`` (the whole set of pairs is what collides)."""

    session_id: str
    label: str
    calls: list[CallIds] = field(default_factory=list)
    exact: bool = False


def show(value: object, width: int = 48) -> str:
    """A short, unambiguous repr of an id (long ones cut, with their length)."""
    text = repr(value)
    if len(text) <= width:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[:width]}…({size:,} chars)"


def hostile_id(rng: random.Random, kind: str) -> str:
    """A turn or call id of ``kind`` (may repeat across sessions: common ids on purpose)."""
    word = rng.choice(WORDS)
    if kind == "plain":
        return word
    if kind == "separators":
        pieces = [rng.choice((*WORDS, *SEPARATORS, *SEPARATORS)) for _ in range(rng.randint(1, 6))]
        return "".join(pieces)
    if kind == "nul":
        return rng.choice([NUL, word + NUL, NUL + word, word + NUL + rng.choice(WORDS)])
    if kind == "non_ascii":
        return word + "".join(rng.choice(NON_ASCII) for _ in range(rng.randint(1, 4)))
    if kind == "emoji":
        return "".join(rng.choice((*EMOJI, word)) for _ in range(rng.randint(1, 4)))
    if kind == "surrogate":
        # Never a high surrogate right before a low one: JSON reads that pair as one
        # astral character, so it would not be the id that was seeded.
        high, low = "\ud800", rng.choice(("\udfff", "\udc00"))
        return rng.choice([word + high, low + word, word + high + word + low, low + high + word])
    return _long(rng, rng.randint(LONG // 10, LONG), (*SEPARATORS, NUL, *NON_ASCII, *EMOJI))


def _long(rng: random.Random, size: int, spice: tuple[str, ...]) -> str:
    """``size`` characters, mostly letters, with up to 20 hostile characters spread in."""
    chars = [rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(size)]
    for _ in range(rng.randint(0, 20)):
        chars[rng.randrange(size)] = rng.choice(spice)[0]
    return "".join(chars)[:size]


def session_id(rng: random.Random, i: int, kind: str, alphabet: Alphabet) -> str:
    """A unique session id of ``kind`` (the index ``i`` keeps it unique)."""
    if kind == "long":
        spice = tuple(sorted(alphabet.session_chars)) or ("_",)
        base = _long(rng, alphabet.session_id_length - 12, spice)
    elif kind == "surrogate" and not alphabet.surrogate_session_ids:
        base = hostile_id(rng, "separators")
    else:
        base = hostile_id(rng, kind)
    sid = alphabet.session_safe(f"{base}~{i}" if rng.random() < 0.5 else f"{i}~{base}")
    return sid if sid not in (".", "..") else f"{sid}{i}"


def _pair(turn: str, call: str, label: str) -> CallIds:
    return CallIds(turn, call, label)


def colon_family(i: int, alphabet: Alphabet) -> list[SessionIds]:
    """Within one session: (``t:x``, ``c``) and (``t``, ``x:c``), equal once joined by ``:``."""
    calls = [_pair("t:x", "c", "colon"), _pair("t", "x:c", "colon")]
    return [SessionIds(f"colon{i}", "colon", calls)]


def brace_family(i: int, alphabet: Alphabet) -> list[SessionIds]:
    """Across sessions ``a`` and ``a}:x``: equal once the session is tagged as ``{a}``."""
    if not {"}", ":"} <= alphabet.session_chars:
        return colon_family(i, alphabet)
    first = SessionIds(f"a{i}", "brace", [_pair("x}:t", "c", "brace")])
    second = SessionIds(f"a{i}}}:x", "brace", [_pair("t", "c", "brace")])
    return [first, second]


def joins_family(i: int, alphabet: Alphabet) -> list[SessionIds]:
    """``c\\nu\\td`` in one session, ``c`` and (``u``, ``d``) in others: equal once the
    pairs are joined with tabs and newlines (the idempotency key's text), across sessions
    too when the emulator can address a session id holding ``\\n`` and ``\\t``."""
    base = f"j{i}"
    pairs = [("t", "c"), ("u", "d"), ("a\tb", "c"), ("a", "b\tc")]
    shapes = [
        SessionIds(base, "joins", [_pair("t", "c\nu\td", "joins")], exact=True),
        SessionIds(f"{base}~", "joins", [_pair(t, c, "joins") for t, c in pairs]),
    ]
    if {"\n", "\t"} <= alphabet.session_chars:  # "j\n" + "t\tc\nu\td", both ways
        shapes.append(SessionIds(f"{base}\nt\tc", "joins", [_pair("u", "d", "joins")], True))
    return shapes


def nul_family(i: int, alphabet: Alphabet) -> list[SessionIds]:
    """Turns ``t\\0a``, ``t\\0b`` and ``t``: equal to whatever cuts strings at a NUL."""
    calls = [_pair("t\x00a", "c", "nul"), _pair("t\x00b", "c", "nul"), _pair("t", "c", "nul")]
    sid = alphabet.session_safe(f"n{i}\x00x")
    return [SessionIds(sid, "nul", calls), SessionIds(alphabet.session_safe(f"n{i}"), "nul", [])]


def unicode_family(i: int, alphabet: Alphabet) -> list[SessionIds]:
    """Composed and decomposed, ZWJ and not, upper and lower: equal once normalized."""
    turns = ["é", "e\u0301", "👩\u200d💻", "👩💻", "T", "t", "ﬁ", "fi"]
    return [SessionIds(f"u{i}", "unicode", [_pair(t, "c", "unicode") for t in turns])]


def long_family(i: int, alphabet: Alphabet) -> list[SessionIds]:
    """Ids of 10,000 characters differing in their last one: equal once truncated."""
    calls = [
        _pair("L" * (LONG - 1) + "a", "c", "long"),
        _pair("L" * (LONG - 1) + "b", "c", "long"),
        _pair("t", "C" * (LONG - 1) + "😀", "long"),
    ]
    return [SessionIds(f"long{i}", "long", calls)]


def surrogate_family(i: int, alphabet: Alphabet) -> list[SessionIds]:
    """Two lone surrogates and the replacement character: equal once encoded lossily."""
    turns = ["\ud800", "\udfff", "\ufffd", "?"]
    sid = f"s{i}\ud800" if alphabet.surrogate_session_ids else f"s{i}"
    return [SessionIds(sid, "surrogate", [_pair(t, "c", "surrogate") for t in turns])]


Family = Callable[[int, Alphabet], list[SessionIds]]
FAMILIES: dict[str, Family] = {
    "colon": colon_family,
    "brace": brace_family,
    "joins": joins_family,
    "nul": nul_family,
    "unicode": unicode_family,
    "long": long_family,
    "surrogate": surrogate_family,
}


def families(alphabet: Alphabet) -> dict[str, Family]:
    """The collision families the alphabet allows."""
    return {k: f for k, f in FAMILIES.items() if k in alphabet.id_kinds() or k not in ID_KINDS}


def fresh_pair(
    rng: random.Random,
    kind: str,
    turns: list[tuple[str, str]],
    taken: Collection[tuple[str, str]],
) -> tuple[str, str, str]:
    """A (turn, call) pair with a call id of ``kind``, not yet used in the session, and
    the kind of its turn (``turns`` holds (turn id, kind) pairs)."""
    for attempt in range(50):
        turn, turn_kind = rng.choice(turns)
        call = hostile_id(rng, kind) if attempt < 40 else f"call_{attempt}_{rng.random()}"
        if (turn, call) not in taken:
            return turn, turn_kind, call
    raise RuntimeError("no fresh (turn, call) pair found")  # pragma: no cover - 50 tries
