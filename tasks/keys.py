"""Every Redis key toolfan writes, in one place, and the spelling of ids inside them.

Ids come from the API and the model, so they may hold any character, the separators of a
key included. Joining them raw made distinct calls share a key (turn ``t:x`` with call
``c``, and turn ``t`` with call ``x:c``) and so share a saved result. Each id is therefore
spelled by :func:`encode_id`, an injective encoding whose alphabet holds neither ``:`` nor
the braces of a hash tag: distinct ids always give distinct keys. Ids made of letters,
digits, ``_``, ``.`` and ``-`` (every id the API issues) are spelled as themselves, so
those keys are the ones earlier versions wrote.

Every key of a batch is scoped by its source and the layout's version
(``toolfan:v2:agents:call:{sess_1}:turn_1:call_1``). Batch ids sit inside ``{...}`` hash
tags, so all keys of one batch land in the same Redis Cluster slot and multi-key scripts
over one batch stay legal there; a legacy key (``toolfan:call:{sess_1}:...``) shares its
batch's slot too, so moving it is a ``RENAME``.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from urllib.parse import unquote

PREFIX = "toolfan"
#: The version of the per-batch key layout: ``toolfan:v2:<source>:<kind>:{<batch>}...``.
VERSION = "v2"

#: Ids spelled as themselves: what the API issues, and what earlier versions keyed raw.
_PLAIN = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
#: Spellings longer than this keep a readable head and end in a digest of the whole id.
LONG = 200
_HEAD = 64
#: Each byte's spelling: itself for letters, digits, ``_``, ``.`` and ``-``; else ``%XX``.
_SPELLING = {
    byte: chr(byte) if _PLAIN.fullmatch(chr(byte)) else f"%{byte:02X}" for byte in range(256)
}
#: Spellings kept of ids that are not plain (a runs batch id is JSON, spelled on every key).
_KEPT = 8192


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
    if len(value) <= LONG:
        return _spelled_kept(value)
    return _spelled(value)


@lru_cache(maxsize=_KEPT)
def _spelled_kept(value: str) -> str:
    """:func:`_spelled`, kept: a poller spells each run in flight's id on every pass."""
    return _spelled(value)


def _spelled(value: str) -> str:
    raw = value.encode("utf-8", "surrogatepass")
    text = raw.decode("latin-1").translate(_SPELLING)
    if len(text) <= LONG:
        return text
    return f"{text[:_HEAD]}~{hashlib.sha256(raw).hexdigest()}"


def scope(source: str) -> str:
    """The prefix of every key of one source's batches, in this layout's version."""
    return f"{PREFIX}:{VERSION}:{encode_id(source)}"


def batch_tag(batch_id: str) -> str:
    """The hash tag shared by every key of one batch."""
    return f"{{{encode_id(batch_id)}}}"


def call(source: str, batch_id: str, turn_id: str, call_id: str) -> str:
    """Hash with the ledger record of one call."""
    return f"{scope(source)}:call:{batch_tag(batch_id)}:{encode_id(turn_id)}:{encode_id(call_id)}"


def calls_of(source: str, batch_id: str) -> str:
    """A SCAN pattern matching every call record of one batch (spellings hold no glob)."""
    return f"{scope(source)}:call:{batch_tag(batch_id)}:*"


def all_calls(source: str) -> str:
    """A SCAN pattern matching every call record of one source."""
    return f"{scope(source)}:call:*"


def claim(source: str, batch_id: str) -> str:
    """String holding the owner token of a batch's claim (a lease with a TTL)."""
    return f"{scope(source)}:claim:{batch_tag(batch_id)}"


def dispatch(source: str, batch_id: str) -> str:
    """Hash describing a batch's current dispatch: owner token, times, expiry."""
    return f"{scope(source)}:dispatch:{batch_tag(batch_id)}"


def gone(source: str, batch_id: str) -> str:
    """String saying a batch ended before it was answered (a run cancelled, expired)."""
    return f"{scope(source)}:gone:{batch_tag(batch_id)}"


def answer(source: str, batch_id: str) -> str:
    """List holding a delivered batch's answer, for callers that wait on it (one element).

    A list, not a string, so any number of waiters block on it with one ``BLMOVE`` of the
    list onto itself, which hands each the answer and leaves it in place.
    """
    return f"{scope(source)}:answer:{batch_tag(batch_id)}"


def then(source: str, batch_id: str) -> str:
    """String naming the work that continues once a batch is answered (a conversation)."""
    return f"{scope(source)}:then:{batch_tag(batch_id)}"


def conversation(conversation_id: str) -> str:
    """Hash holding a durable tool loop: its spec, status, and every saved step."""
    return f"{PREFIX}:{VERSION}:conversation:{batch_tag(conversation_id)}"


def conversation_lease(conversation_id: str) -> str:
    """String naming the worker calling a conversation's model now (a lease with a TTL)."""
    return f"{PREFIX}:{VERSION}:conversation:{batch_tag(conversation_id)}:lease"


def conversation_end(conversation_id: str) -> str:
    """List holding a conversation's final status once it ended, for its waiters."""
    return f"{PREFIX}:{VERSION}:conversation:{batch_tag(conversation_id)}:end"


def webhook_seen(webhook_id: str) -> str:
    """String marking a webhook delivery as taken, so a repeat of it does nothing."""
    return f"{PREFIX}:{VERSION}:webhook:seen:{encode_id(webhook_id)}"


#: The hash tag of every approval key: one slot, so a script can keep the index with them.
APPROVALS_TAG = "{approvals}"


def approval(approval_id: str) -> str:
    """Hash holding one call's approval: the request, its digest, and the decision."""
    return f"{PREFIX}:{VERSION}:approvals:{APPROVALS_TAG}:{encode_id(approval_id)}"


def approvals_pending() -> str:
    """Sorted set of the undecided approvals' ids, by deadline."""
    return f"{PREFIX}:{VERSION}:approvals:{APPROVALS_TAG}:pending"


#: SCAN patterns over every source: all call records, all claims.
ALL_CALLS = f"{PREFIX}:{VERSION}:*:call:*"
ALL_CLAIMS = f"{PREFIX}:{VERSION}:*:claim:*"


def batch_of(key: str) -> str:
    """The batch id a call, claim or dispatch key spells (percent-decoded; a long id's head)."""
    tag = key[key.index("{") + 1 : key.index("}")]
    return unquote(tag)


def source_of(key: str) -> str:
    """The source a key of this layout belongs to."""
    return unquote(key.split(":", 3)[2])


#: The key layout before sources: ``toolfan:call:{session}:turn:call`` and so on. Its
#: records belong to the one source that existed then (see :mod:`tasks.upgrade`).
LEGACY_KINDS = ("call", "claim", "dispatch")
#: String naming the key layout the ledger holds, once :mod:`tasks.upgrade` moved it.
SCHEMA = f"{PREFIX}:schema"


def upgraded(legacy_key: str, source: str) -> str:
    """The key a record of the legacy layout moves to: same kind, same batch, same slot."""
    return f"{scope(source)}:{legacy_key[len(PREFIX) + 1 :]}"


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
    """The dispatch key of the batch whose claim key is ``claim_key``."""
    head, _, tail = claim_key.partition(":claim:")
    return f"{head}:dispatch:{tail}"
