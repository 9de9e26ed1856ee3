"""What the emulator can serve today, found out on a throw-away emulator before the run.

The emulator is being taught to route every id over HTTP; until it can, a session id it
cannot address (a ``/`` or a newline in the path, a lone surrogate) would be counted as
lost by toolfan when it is the emulator's doing. So the run probes, with the standard
encoding any client would use (UTF-8, percent-encoded; lone surrogates as their
``surrogatepass`` bytes), and plans around what fails, naming it in the report.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx

from emulator import EmulatorState, function_call, running_emulator
from emulator.testing import TEST_API_KEY
from tests.fuzz.ids import HOSTILE_CHARS, LONG, Alphabet

HEADERS = {"Authorization": f"Bearer {TEST_API_KEY}", "OpenAI-Beta": "agents=v1"}


@dataclass(frozen=True)
class Capabilities:
    """The emulator's limits, as probed.

    Attributes:
        alphabet: What session ids (and, for surrogates, any id) may hold.
        raw_actions: Whether ``create_session`` takes ``raw_actions``.
        unaddressable: Characters of session ids the emulator did not route, with why.
    """

    alphabet: Alphabet
    raw_actions: bool
    unaddressable: dict[str, str] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """What was skipped, for the informational line."""
        notes = []
        if self.unaddressable:
            chars = "".join(repr(c)[1:-1] for c in sorted(self.unaddressable))
            notes.append(f"session ids without {chars} (emulator cannot route them)")
        if not self.alphabet.surrogates:
            notes.append("no lone surrogates in seeded ids/arguments (emulator cannot list them)")
        elif not self.alphabet.surrogate_session_ids:
            notes.append("no lone surrogates in session ids (emulator cannot route them)")
        if self.alphabet.session_id_length < LONG:
            notes.append(f"session ids cut to {self.alphabet.session_id_length} chars")
        if not self.raw_actions:
            notes.append("no raw 5,000-deep/5,000-digit argument objects (no raw_actions)")
        return notes


def _path(session_id: str) -> str:
    return quote(session_id.encode("utf-8", "surrogatepass"), safe="")


def _result(turn: str, call: str) -> dict[str, object]:
    event = {"type": "agent.session.input.tool_result", "turn_id": turn, "call_id": call}
    return {"events": [{**event, "success": True, "output": "probe"}]}


def addressable(client: httpx.Client, state: EmulatorState, session_id: str) -> str | None:
    """None when the emulator retrieves, pages after and answers ``session_id``; else why."""
    action = function_call("probe", {}, turn_id="t", call_id="c")
    state.create_session([action], session_id=session_id)
    path = f"/agents/sessions/{_path(session_id)}"
    checks = [
        ("retrieve", client.get(path), 200),
        ("list after it", client.get(f"/agents/sessions?limit=1&after={_path(session_id)}"), 200),
        ("post events", client.post(f"{path}/events", json=_result("t", "c")), 202),
    ]
    for what, response, wanted in checks:
        if response.status_code != wanted:
            return f"{what}: HTTP {response.status_code}"
    return None


def _probe_id(client: httpx.Client, state: EmulatorState, session_id: str) -> str | None:
    try:
        return addressable(client, state, session_id)
    except (httpx.HTTPError, UnicodeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"[:120]


def _lists_surrogates(client: httpx.Client, state: EmulatorState) -> bool:
    state.create_session([function_call("probe", {"a": "\ud800"}, turn_id="\udfff", call_id="c")])
    try:
        response = client.get("/agents/sessions?limit=100")
        return response.status_code == 200 and "\\ud800" in response.text
    except httpx.HTTPError:
        return False


def probe() -> Capabilities:
    """Probe a fresh emulator; takes well under a second."""
    raw = "raw_actions" in inspect.signature(EmulatorState.create_session).parameters
    with running_emulator() as emu:
        client = httpx.Client(base_url=emu.base_url, headers=HEADERS, timeout=10)
        with client:
            failed = {}
            for i, ch in enumerate(HOSTILE_CHARS):
                why = _probe_id(client, emu.state, f"p{i}{ch}q")
                if why is not None:
                    failed[ch] = why
            surrogates = _lists_surrogates(client, emu.state)
            surrogate_ids = surrogates and _probe_id(client, emu.state, "s\ud800") is None
            length = next(
                (n for n in (LONG, 4000, 1000) if _probe_id(client, emu.state, "L" * n) is None),
                200,
            )
    chars = frozenset(HOSTILE_CHARS) - failed.keys()
    alphabet = Alphabet(chars, surrogates, surrogate_ids, length)
    return Capabilities(alphabet, raw, failed)


def unreadable(base_url: str, session_ids: Iterable[str]) -> dict[str, str]:
    """The sessions whose JSON, as the emulator serves it, Python's own ``json.loads``
    cannot read (with why): any client built on it fails on the page holding them."""
    found = {}
    with httpx.Client(base_url=base_url, headers=HEADERS, timeout=30) as client:
        for sid in session_ids:
            try:
                text = client.get(f"/agents/sessions/{_path(sid)}").text
            except (httpx.HTTPError, UnicodeError) as exc:
                found[sid] = f"not retrievable: {type(exc).__name__}"
                continue
            try:
                json.loads(text)
            except (ValueError, RecursionError) as exc:
                found[sid] = f"{type(exc).__name__}: {str(exc)[:100]}"
    return found
