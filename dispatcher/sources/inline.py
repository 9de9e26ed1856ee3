"""The ``inline`` source: tool calls an application hands the fleet itself, and waits for.

Applications that drive Chat Completions or Responses have no hosted session to poll: the
model's tool calls are in their hands. So they give them to the fleet
(:mod:`toolfan.calls`), and the fleet answers them as one batch, exactly as it answers a
session's: one ``execute`` per call on its function's queue, one chord, one ``submit``;
a batch of one call is delivered by the worker that ran it, with no chord (the time of a
single call is mostly the chord's and the ``submit``'s hops).
The delivery is a Redis list holding the batch's answer (:func:`tasks.keys.answer`), which
the caller blocks on; a repeat of the same batch finds it there.

A batch's id derives from the protocol, the conversation (when the caller names one) and
the sorted call ids, so an application that crashes and repeats the call gets the saved
results, and no function runs twice.

A batch may name what continues once it is answered (:func:`tasks.keys.then`): the durable
tool loop's next model step. Delivery sends that task every time it delivers, even when the
answer was saved before, so a delivery that died between the two still continues; the
step itself is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import redis

from handlers.text import shown
from tasks import keys
from tasks.app import app
from tasks.delivery import Delivered, RetryLater
from tasks.lua import LuaScript
from tasks.runtime import get_ledger

log = logging.getLogger("toolfan.inline")

NAME = "inline"

#: Store the answer unless one is there (the first answer wins, as the ledger's first
#: result does), keep it for the ledger's TTL, and return the continuation, if any.
DELIVER = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('RPUSH', KEYS[1], ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return redis.call('GET', KEYS[2])
"""


def batch_id(api: str, conversation_id: str | None, call_ids: Sequence[str]) -> str:
    """The id of a batch of inline calls: a digest of what makes it the same batch."""
    identity = json.dumps([api, conversation_id, sorted(set(call_ids))])
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{api}_{digest[:40]}"


def encode_answer(results: Sequence[Mapping[str, Any]]) -> str:
    """The answer of a batch as stored: each call's result payload, by call id."""
    return json.dumps({str(r["call_id"]): dict(r) for r in results})


def decode_answer(raw: str) -> dict[str, dict[str, Any]]:
    """The results of a stored answer, by call id."""
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("a stored answer is not a JSON object")
    return value


class InlineSource:
    """Delivers an inline batch by storing its answer where its caller waits."""

    name = NAME
    batch_label = "batch_id"
    #: Storing an answer is one Redis script: the worker that ran a batch's only call
    #: does it, with no chord and no ``submit`` task between the call and its caller.
    delivers_in_place = True

    def deliver(self, batch_id: str, results: Sequence[Mapping[str, Any]]) -> Delivered:
        """Store the batch's answer (once) and start what continues after it, if anything."""
        ledger = get_ledger(NAME)
        try:
            then = _script(ledger.client)(
                [keys.answer(NAME, batch_id), keys.then(NAME, batch_id)],
                [encode_answer(results), ledger.ttl],
            )
        except redis.RedisError as exc:
            raise RetryLater(f"the answer could not be stored: {exc}", status="retry") from exc
        if then:
            continue_with(batch_id, str(then))
        return Delivered(batch_id, "stored", len(results))


def continue_with(batch_id: str, then: str) -> None:
    """Send the task a batch names as its continuation (``{"task", "args"}`` as JSON).

    Raises:
        RetryLater: the broker did not take it; the delivery is repeated (the answer is
            kept, so the repeat only sends this again).
    """
    try:
        spec = json.loads(then)
        task, args = str(spec["task"]), list(spec.get("args", []))
    except (ValueError, KeyError, TypeError) as exc:
        log.error("batch_id=%s has an unreadable continuation: %s", shown(batch_id), exc)
        return
    try:
        app.send_task(task, args=args, ignore_result=True)
    except Exception as exc:  # kombu's connection errors have no common root
        raise RetryLater(f"the next step could not be sent: {exc}", status="retry") from exc


@cache
def _script(client: redis.Redis) -> LuaScript:
    return LuaScript(client, DELIVER)


#: The instance the ``toolfan.sources`` entry point names.
SOURCE = InlineSource()
