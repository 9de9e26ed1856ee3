"""Every Redis key toolfan writes, in one place, and the spelling of ids inside them.

Ids come from the API and the model, so they may hold any character, the separators of a
key included. Joining them raw made distinct calls share a key (turn ``t:x`` with call
``c``, and turn ``t`` with call ``x:c``) and so share a saved result. Each id is therefore
spelled by :func:`encode_id`, an injective encoding whose alphabet holds neither ``:`` nor
the braces of a hash tag: distinct ids always give distinct keys. Ids made of letters,
digits, ``_``, ``.`` and ``-`` (every id the API issues) are spelled as themselves, so
those keys are the ones earlier versions wrote.

Session ids sit inside ``{...}`` hash tags, so all keys of one session land in the same
Redis Cluster slot and multi-key scripts over one session stay legal there.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote_from_bytes, unquote

PREFIX = "toolfan"

#: Ids spelled as themselves: what the API issues, and what earlier versions keyed raw.
_PLAIN = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
#: Spellings longer than this keep a readable head and end in a digest of the whole id.
LONG = 200
_HEAD = 64


def encode_id(value: str) -> str:
    """The key-safe spelling of one id: injective, and free of ``:``, ``{`` and ``}``.

    Anything but letters, digits, ``_``, ``.`` and ``-`` is percent-encoded from the id's
    UTF-8 bytes (lone surrogates included, through ``surrogatepass``), ``%`` and ``~``
    among them. A spelling over :data:`LONG` characters becomes its first characters, a
    ``~`` (which no short spelling holds) and the SHA-256 of the id, so a 10,000-character
    id costs a key of under 150 characters.
    """
    if _PLAIN.fullmatch(value):
        return value
    raw = value.encode("utf-8", "surrogatepass")
    text = quote_from_bytes(raw, safe="").replace("~", "%7E")
    if len(text) <= LONG:
        return text
    return f"{text[:_HEAD]}~{hashlib.sha256(raw).hexdigest()}"


def session_tag(session_id: str) -> str:
    """The hash tag shared by every key of one session."""
    return f"{{{encode_id(session_id)}}}"


def call(session_id: str, turn_id: str, call_id: str) -> str:
    """Hash with the ledger record of one call."""
    return f"{PREFIX}:call:{session_tag(session_id)}:{encode_id(turn_id)}:{encode_id(call_id)}"


def calls_of(session_id: str) -> str:
    """A SCAN pattern matching every call record of one session (spellings hold no glob)."""
    return f"{PREFIX}:call:{session_tag(session_id)}:*"


def claim(session_id: str) -> str:
    """String holding the owner token of a session's claim (a lease with a TTL)."""
    return f"{PREFIX}:claim:{session_tag(session_id)}"


def dispatch(session_id: str) -> str:
    """Hash describing a session's current dispatch: owner token, times, expiry."""
    return f"{PREFIX}:dispatch:{session_tag(session_id)}"


def session_of(call_key: str) -> str:
    """The session id a call key spells (percent-decoded; a long id's head only)."""
    tag = call_key[len(f"{PREFIX}:call:{{") : call_key.index("}")]
    return unquote(tag)


#: Sorted set of worker names scored by their last heartbeat (epoch seconds).
WORKERS = f"{PREFIX}:workers"
#: Short lock: one reaper at a time.
REAPING = f"{PREFIX}:reaping"
#: Count of orphaned messages put back on their queues, for ``toolfan status``.
ORPHANS_REDONE = f"{PREFIX}:orphans:redone"


def held(worker: str) -> str:
    """Set of the delivery tags a worker holds, as of its last heartbeat."""
    return f"{PREFIX}:held:{encode_id(worker)}"


def dispatch_of_claim(claim_key: str) -> str:
    """The dispatch key of the session whose claim key is ``claim_key``."""
    return claim_key.replace(f"{PREFIX}:claim:", f"{PREFIX}:dispatch:", 1)
