r"""``GET /agents/sessions/{id}/events``: the session's status changes as server-sent events.

The real stream carries many event kinds (turn deltas, items, environment changes); the
emulator sends the ones that carry the whole session, which are the ones an action runner
needs: ``agent.session.requires_action``, ``.in_progress``, ``.idle`` and ``.failed``. It
sends the current state first, then every visible change, and closes when the session is
idle or failed, when the client goes away, or after the state's ``stream_lifetime``.
Event types follow the session's real status, even where a raw ``status`` field serves
another; the JSON is ASCII and may span several ``data:`` lines when a raw text holds line
breaks (a client joins them with ``\n``, which JSON reads as whitespace).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import string
from collections.abc import AsyncIterator

from emulator.jsontext import dumps
from emulator.state import EmulatorState
from emulator.wire import JSON, new_id

_TERMINAL = {"idle", "failed"}
_POLL_SECONDS = 0.05
_ALPHABET = string.ascii_letters + string.digits
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def session_event(session: JSON, *, obfuscate: bool, status: str | None = None) -> JSON:
    """The ``agent.session.<status>`` event carrying ``session``.

    ``status`` is the session's real status, when a raw field may replace the served one.
    """
    event: JSON = {
        "type": f"agent.session.{status or session['status']}",
        "event_id": new_id("evt"),
        "session": session,
    }
    if obfuscate:
        # The real stream pads events so their sizes do not leak content.
        event["obfuscation"] = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    return event


def encode(event: JSON) -> str:
    """One SSE frame: the ``event:`` line names the type, ``data:`` lines hold the JSON."""
    data = "".join(f"data: {line}\n" for line in _LINE_BREAK.split(dumps(event)))
    return f"event: {event['type']}\n{data}\n"


async def session_events(
    state: EmulatorState, session_id: str, *, obfuscate: bool = True
) -> AsyncIterator[str]:
    """Frames for one connection; raises ``WireError`` (404) before the first frame."""
    session, token = state.snapshot(session_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + state.stream_lifetime
    yield encode(session_event(session, obfuscate=obfuscate, status=token[1]))
    while token[1] not in _TERMINAL and loop.time() < deadline:
        await asyncio.sleep(_POLL_SECONDS)
        latest, latest_token = state.snapshot(session_id)
        if latest_token != token:
            session, token = latest, latest_token
            yield encode(session_event(session, obfuscate=obfuscate, status=token[1]))
