"""What the fuzz run seeds, decided up front from one seeded RNG: sessions and calls.

Planning is pure (no processes, no clock), so a seed names one campaign. Every call has a
kind per axis, kept as labels (``family=colon``, ``turn=nul``, ``call=surrogate``,
``name=celery``, ``args=json_string_deep5000``, ``output=content_empty_text``, and its
list ``page``) for the report; the first sessions of a run go through every kind of every
axis once, so even a CI-sized run holds each of them, and the big kinds (megabytes each)
are capped per run so memory stays bounded. The last session of each list page, the
cursor of the next page's request, gets an id that is hard to put in a query string.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from typing import Any

from tests.fuzz.ids import (
    ID_KINDS,
    Alphabet,
    SessionIds,
    families,
    fresh_pair,
    hostile_id,
    session_id,
)
from tests.fuzz.kinds import ASYNC_TOOL, MB, MUST_SUCCEED, OUTPUT_KINDS, SYNC_TOOL, new_token

#: Argument kinds: weight; what the call must then end in ("run": the tool runs, "invalid":
#: an invalid-arguments error, "any": either is right); and whether it is big.
ARG_KINDS: dict[str, tuple[float, str, bool]] = {
    "valid": (70, "run", False),
    "valid_huge": (0.5, "any", True),  # run, or refused as too big: both are fair
    "json_string_valid": (2, "any", False),
    "json_string_invalid": (1, "invalid", False),
    "json_string_deep1000": (0.5, "invalid", False),
    "json_string_deep5000": (0.5, "invalid", False),
    "json_string_bignum": (0.5, "any", False),
    "wrong_type": (2, "invalid", False),
    "unknown_key": (1, "invalid", False),
    "unknown_key_huge": (0.3, "invalid", True),
    "missing_required": (1, "invalid", False),
    "empty_object": (0.5, "invalid", False),
    "not_object": (2, "invalid", False),
    "missing": (0.5, "invalid", False),
    "raw_deep1000": (0.3, "invalid", False),
    "raw_deep5000": (0.3, "invalid", False),
    "raw_bignum": (0.3, "any", False),
}
RAW_KINDS = frozenset(k for k in ARG_KINDS if k.startswith("raw_"))
UNKNOWN_NAMES = (
    "fuzz_missing", "Fuzz_Echo", "fuzz_echo ", " fuzz_echo", "fn.fuzz_echo", "fuzz_echo\x00",
    "../fuzz_echo", "é😀", "fuzz_echo:", "{fuzz_echo}",
)  # fmt: skip
CELERY_NAMES = (
    "celery.chord_unlock", "celery.backend_cleanup", "celery.chord", "celery.group",
    "toolfan.submit", "toolfan.execute", "toolfan.poll",
)  # fmt: skip
#: Name kinds and weights: the two tools, and names no tool has (answered "unknown").
NAME_KINDS: dict[str, float] = {
    "sync": 62,
    "async": 25,
    "unknown": 5,
    "empty": 2,
    "celery": 4,
    "long": 0.5,
    "surrogate": 0.5,
}
#: Sessions per list page (toolfan reads pages of 100, oldest first): the last session of
#: each page is the cursor of the next request, so those get the ids hardest to send.
PAGE = 100
CURSOR_KINDS = ("surrogate", "separators", "nul", "long", "emoji", "non_ascii")
CURSOR_SPICE = "&a=b#c+d%e?f g/h;i"
#: Entries toolfan cannot answer (no usable turn or call id): to be left alone.
UNANSWERABLE = (
    "no_turn_id", "no_call_id", "empty_turn_id", "empty_call_id", "null_call_id",
    "number_call_id", "array_turn_id", "bare",
)  # fmt: skip


@dataclass(frozen=True)
class PlannedCall:
    """One seeded ``function_call`` entry and what the run expects of it.

    Attributes:
        turn_id: As seeded (anything, for an unanswerable entry).
        call_id: Likewise.
        token: This call's own token (in its arguments when they can hold one).
        labels: ``axis=kind`` strings naming how it is hostile.
        action: The required action, or None when it is served raw (``raw``).
        raw: A ``raw_actions`` entry, for arguments ``json.dumps`` cannot write.
        name: The function name it calls.
        answerable: Whether toolfan must answer it.
        expect: What its answer must be: ``run`` (the tool ran: its output or its own
            failure), ``invalid`` (an invalid-arguments error), ``unknown`` (an
            unknown-function error) or ``any``.
        must_succeed: Whether the answer must be a success (tool ran a harmless kind).
    """

    turn_id: Any
    call_id: Any
    token: str
    labels: tuple[str, ...]
    action: dict[str, Any] | None
    raw: dict[str, Any] | None = None
    name: str = ""
    answerable: bool = True
    expect: str = "any"
    must_succeed: bool = False

    @property
    def pair(self) -> tuple[Any, Any]:
        """The (turn, call) pair an answer names."""
        return self.turn_id, self.call_id


@dataclass
class PlannedSession:
    """A session to seed: its id, its calls, its metadata."""

    session_id: str
    label: str
    calls: list[PlannedCall] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def answerable(self) -> list[PlannedCall]:
        """The calls toolfan must answer."""
        return [c for c in self.calls if c.answerable]

    @property
    def actions(self) -> list[dict[str, Any]]:
        """The required actions ``create_session`` takes as JSON values."""
        return [c.action for c in self.calls if c.action is not None]

    @property
    def raw_actions(self) -> list[dict[str, Any]]:
        """The required actions served from raw JSON text."""
        return [c.raw for c in self.calls if c.raw is not None]


def _deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def arguments(rng: random.Random, kind: str, token: str, output: str) -> Any:
    """The ``arguments`` value of ``kind`` (raw kinds: see :func:`raw_arguments`)."""
    valid: dict[str, Any] = {"token": token, "kind": output}
    if output == "sleep":
        valid["ms"] = rng.randint(20, 200)
    text = json.dumps(valid)
    table: dict[str, Any] = {
        "valid": valid,
        "json_string_valid": text,
        "json_string_invalid": text[: rng.randint(1, len(text) - 1)],
        "json_string_deep1000": text[:-1] + ', "pad": ' + _deep_text(1000) + "}",
        "json_string_deep5000": text[:-1] + ', "pad": ' + _deep_text(5000) + "}",
        "json_string_bignum": text[:-1] + ', "ms": ' + "9" * 5000 + "}",
        "unknown_key": {**valid, "surprise": 1},
        "missing_required": {"kind": output},
        "empty_object": {},
    }
    if kind in table:
        return table[kind]
    if kind == "valid_huge":
        return {**valid, "pad": "p" * rng.randint(1 * MB, 3 * MB)}
    if kind == "unknown_key_huge":
        return {**valid, "k" * 100_000: 1}
    if kind == "wrong_type":
        choices = [{**valid, "token": 12345}, {**valid, "kind": [output]}, {**valid, "ms": "soon"}]
        return rng.choice(choices)
    return rng.choice([[token, output], 42, -0.0, True, None, "plain words", "[1, 2]"])


def raw_arguments(kind: str, token: str, output: str) -> str:
    """Raw JSON text of an arguments object nested 1,000 or 5,000 deep, or a 5,000-digit
    number: what ``json.dumps`` refuses to write but an API may well send."""
    head = json.dumps({"token": token, "kind": output})[:-1]
    if kind == "raw_bignum":
        return head + ', "ms": ' + "9" * 5000 + "}"
    depth = 5000 if kind == "raw_deep5000" else 1000
    return head + ', "pad": ' + _deep_text(depth) + "}"


def _weighted(rng: random.Random, table: dict[str, Any], allowed: set[str]) -> str:
    names = [k for k in table if k in allowed]
    weights = [table[k][0] if isinstance(table[k], tuple) else table[k] for k in names]
    return rng.choices(names, weights=weights)[0]


class Planner:
    """Plans the sessions of one run: coverage of every kind first, then random ones."""

    def __init__(
        self, rng: random.Random, count: int, alphabet: Alphabet, raw: bool, without: set[str]
    ) -> None:
        self.rng = rng
        axes = ("ids", "sid", "turn", "call")
        dropped = frozenset(k for k in ID_KINDS for a in axes if f"{a}={k}" in without)
        self.alphabet = alphabet = dataclasses.replace(alphabet, excluded=dropped)
        cap = min(8, max(1, count // 100))
        self.left = {
            k: cap for k, v in {**OUTPUT_KINDS, **ARG_KINDS}.items() if v[-1] is True
        }  # big kinds: how many more this run may hold
        self.outputs = {k for k in OUTPUT_KINDS if f"output={k}" not in without}
        self.args = {k for k in ARG_KINDS if f"args={k}" not in without}
        self.args -= set() if raw else RAW_KINDS
        self.names = {k for k in NAME_KINDS if f"name={k}" not in without}
        if "surrogate" not in alphabet.id_kinds():
            self.names.discard("surrogate")
        self.families = {
            k: f for k, f in families(alphabet).items() if f"family={k}" not in without
        }
        self.todo: dict[str, list[str]] = {
            "output": sorted(self.outputs),
            "args": sorted(self.args - {"valid"}),
            "name": sorted(self.names - {"sync"}),
            "unanswerable": [u for u in UNANSWERABLE if f"unanswerable={u}" not in without],
            "family": sorted(self.families),
            "sid": list(alphabet.id_kinds()),
            "call": list(alphabet.id_kinds()),
        }
        self.seen_ids: set[str] = set()

    def plan(self, count: int) -> list[PlannedSession]:
        """``count`` sessions with unique ids, in seeding order."""
        sessions: list[PlannedSession] = []
        while len(sessions) < count:
            for shape in self._shapes(len(sessions)):
                if len(sessions) < count and shape.session_id not in self.seen_ids:
                    self.seen_ids.add(shape.session_id)
                    sessions.append(self._session(shape, len(sessions) // PAGE + 1))
        return sessions

    def _shapes(self, i: int) -> list[SessionIds]:
        rng = self.rng
        if i % PAGE == PAGE - 1:
            kinds = [k for k in CURSOR_KINDS if k in self.alphabet.id_kinds()] or ["plain"]
            kind = kinds[(i // PAGE) % len(kinds)]
            sid = self.alphabet.session_safe(session_id(rng, i, kind, self.alphabet) + CURSOR_SPICE)
            return [SessionIds(sid, f"sid=cursor_{kind}")]
        room = i % PAGE < PAGE - 4  # a family (up to 3 sessions) must not take a page end
        family = self._pop("family") if i % 2 == 0 and room else None
        if family is None and room and self.families and rng.random() < 0.08:
            family = rng.choice(sorted(self.families))
        if family is not None:
            return self.families[family](i, self.alphabet)
        kind = self._pop("sid") or self.alphabet.pick(rng)
        return [SessionIds(session_id(rng, i, kind, self.alphabet), f"sid={kind}")]

    def _pop(self, axis: str) -> str | None:
        todo = self.todo[axis]
        return todo.pop(0) if todo else None

    def _session(self, shape: SessionIds, page: int) -> PlannedSession:
        """A session of ``shape``; its calls' labels name its list page too (a page that
        cannot be read loses all of its sessions)."""
        rng = self.rng
        label = shape.label if "=" in shape.label else f"family={shape.label}"
        session = PlannedSession(shape.session_id, label, metadata={"fuzz": label})
        label = f"{label} page={page}"
        if rng.random() < 0.1:
            session.metadata["note"] = self._id(self.alphabet.pick(rng))
        for fixed in shape.calls:
            session.calls.append(self._call(fixed.turn, fixed.call, f"ids={fixed.label}", label))
        if shape.exact:
            return session
        kinds = [self.alphabet.pick(rng) for _ in range(2)]
        turns = [(self._id(kind), kind) for kind in kinds]
        taken = {c.pair for c in session.calls}
        for _ in range(rng.randint(0 if shape.calls else 1, 6)):
            kind = self._pop("call") or self.alphabet.pick(rng)
            turn, turn_kind, call = fresh_pair(rng, kind, turns[: rng.randint(1, 2)], taken)
            taken.add((turn, call))
            ids = f"turn={turn_kind} call={kind}"
            session.calls.append(self._call(turn, call, ids, label))
        unanswerable = self._pop("unanswerable")
        if unanswerable is None and rng.random() < 0.04:
            unanswerable = rng.choice(UNANSWERABLE)
        if unanswerable is not None:
            session.calls.append(self._unanswerable(unanswerable, label))
        return session

    def _id(self, kind: str) -> str:
        return hostile_id(self.rng, kind)

    def _name(self, kind: str) -> str:
        if kind in ("sync", "async"):
            return SYNC_TOOL if kind == "sync" else ASYNC_TOOL
        special = {"empty": "", "long": "n" * 10_000, "surrogate": "fuzz_echo\ud800"}
        if kind in special:
            return special[kind]
        return self.rng.choice(UNKNOWN_NAMES if kind == "unknown" else CELERY_NAMES)

    def _take(self, axis: str, table: dict[str, Any], allowed: set[str]) -> str:
        """The next kind on ``axis``: a coverage one while any is left, else at random."""
        kind = self._pop(axis)
        while kind is None or self.left.get(kind, 1) <= 0:
            kind = _weighted(self.rng, table, allowed)
        if kind in self.left:
            self.left[kind] -= 1
        return kind

    def _kinds(self) -> tuple[str, str]:
        """Name and argument kinds: each axis covered in turn, with the others harmless."""
        tool = self.rng.choice(["sync", "async"])
        if self.todo["output"]:
            return tool, "valid"
        if self.todo["name"]:
            return self._take("name", NAME_KINDS, self.names), "valid"
        if self.todo["args"]:
            return tool, self._take("args", ARG_KINDS, self.args)
        return self._take("name", NAME_KINDS, self.names), self._take("args", ARG_KINDS, self.args)

    def _call(self, turn: str, call: str, ids_label: str, session_label: str) -> PlannedCall:
        rng = self.rng
        token = new_token(rng)
        name_kind, args_kind = self._kinds()
        tool = name_kind in ("sync", "async")
        expect = ARG_KINDS[args_kind][1] if tool else "unknown"
        runs = expect in ("run", "any")
        output = self._take("output", OUTPUT_KINDS, self.outputs) if runs else "text"
        labels = (*session_label.split(), *ids_label.split(), f"name={name_kind}")
        labels += (f"args={args_kind}",)
        labels += (f"output={output}",) if runs else ()
        must = expect == "run" and output in MUST_SUCCEED
        action: dict[str, Any] = {"type": "function_call", "turn_id": turn, "call_id": call}
        name = action["name"] = self._name(name_kind)
        if args_kind in RAW_KINDS:
            head = json.dumps(action)[:-1]
            text = f'{head}, "arguments": {raw_arguments(args_kind, token, output)}}}'
            raw = {"json": text, "turn_id": turn, "call_id": call, "name": name}
            return PlannedCall(turn, call, token, labels, None, raw, name, True, expect, must)
        if args_kind != "missing":
            action["arguments"] = arguments(rng, args_kind, token, output)
        return PlannedCall(turn, call, token, labels, action, None, name, True, expect, must)

    def _unanswerable(self, shape: str, session_label: str) -> PlannedCall:
        token = new_token(self.rng)
        action: dict[str, Any] = {"type": "function_call", "turn_id": "t_unans", "call_id": "c"}
        action |= {"name": SYNC_TOOL, "arguments": {"token": token, "kind": "text"}}
        changes: dict[str, dict[str, Any]] = {
            "empty_turn_id": {"turn_id": ""},
            "empty_call_id": {"call_id": ""},
            "null_call_id": {"call_id": None},
            "number_call_id": {"call_id": 42},
            "array_turn_id": {"turn_id": ["t"]},
        }
        action.update(changes.get(shape, {}))
        drop = {"no_turn_id": ["turn_id"], "no_call_id": ["call_id"], "bare": ["call_id", "name"]}
        for key in drop.get(shape, []):
            del action[key]
        turn, call = action.get("turn_id"), action.get("call_id")
        labels = (*session_label.split(), f"unanswerable={shape}")
        return PlannedCall(turn, call, token, labels, action, None, SYNC_TOOL, answerable=False)


def plan_sessions(
    rng: random.Random,
    count: int,
    alphabet: Alphabet | None = None,
    raw: bool = False,
    without: set[str] | None = None,
) -> list[PlannedSession]:
    """The sessions of a run, in seeding order; ``without`` drops ``axis=kind`` labels."""
    planner = Planner(rng, count, alphabet or Alphabet(), raw, without or set())
    return planner.plan(count)
