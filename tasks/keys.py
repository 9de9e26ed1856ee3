"""Every Redis key toolfan writes, in one place.

Session ids sit inside ``{...}`` hash tags, so all keys of one session land in the same
Redis Cluster slot and multi-key scripts over one session stay legal there.
"""

from __future__ import annotations

PREFIX = "toolfan"


def call(session_id: str, turn_id: str, call_id: str) -> str:
    """Hash with the ledger record of one call."""
    return f"{PREFIX}:call:{{{session_id}}}:{turn_id}:{call_id}"


def claim(session_id: str) -> str:
    """String holding the owner token of a session's claim (a lease with a TTL)."""
    return f"{PREFIX}:claim:{{{session_id}}}"


def dispatch(session_id: str) -> str:
    """Hash describing a session's current dispatch: owner token, times, expiry."""
    return f"{PREFIX}:dispatch:{{{session_id}}}"
