"""Sending a batch's chord: Celery's own messages, one producer and one round trip per batch.

A chord sent through Celery's canvas (``chord(header)(body)``) costs its sender, for every
call: a clone and a freeze of each signature, a producer taken from the pool and given
back, and one broker round trip (an LPUSH on Redis); and for every chord two round trips
to the result backend to set its size. A poller dispatching a page of 100 batches of five
calls paid that 800 times, and the canvas's Python work was about half of the poller's
CPU: more than the API's pages, the claims and the ledger together.

:func:`send_chord` sends the very same messages (Celery's protocol, the body in each
header task's ``chord`` field, the chord's size in the result backend where its Redis
chords look for it) with one producer held for the batch. On a Redis broker the messages
go out in one pipeline through kombu's publish batch (new in kombu 5.7); with any other
broker, or where kombu cannot batch safely (a connection that retries on its own), kombu
publishes each message as it is made, as Celery would. A test compares the messages with
those of Celery's canvas field by field, so a Celery upgrade that changes them fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from celery import Celery
from celery.canvas import Signature
from celery.utils import uuid

#: The result backend's chord-size key suffix (Celery's Redis backend: ``<group>.s``).
SIZE_SUFFIX = ".s"


def send_chord(app: Celery, header: Sequence[Signature[Any]], body: Signature[Any]) -> str:
    """Send ``header``'s tasks as a chord whose callback is ``body``; returns the group id.

    Every header task carries the body, the group id and its own index, as Celery's canvas
    sends them; the chord's size is in the result backend before any message is out, so
    no header task can finish before it is there.

    Raises:
        ValueError: ``header`` is empty (a chord of nothing never calls its body).
        Exception: whatever the broker or the backend raised; on a Redis broker a failed
            batch's messages may be partly out (kombu's ``BatchPublishError``).
    """
    if not header:
        raise ValueError("a chord needs at least one header task")
    names = [sig.task for sig in header]
    if not all(names):
        raise ValueError("every header task needs a task name")
    group_id = uuid()
    callback = body.clone()
    callback.freeze(uuid(), group_id=group_id)
    with app.producer_or_acquire() as producer, producer.batch():
        set_chord_size(app.backend, group_id, len(header))
        declared = _declare_queues(app, producer, header)
        for index, (name, sig) in enumerate(zip(names, header, strict=True)):
            options = {k: v for k, v in sig.options.items() if k not in _CHORD_FIELDS}
            if options.get("queue") in declared:
                options["declare"] = []  # declared above, once for the batch
            app.send_task(
                str(name),
                args=sig.args,
                kwargs=sig.kwargs,
                producer=producer,
                add_to_parent=False,
                task_id=sig.options.get("task_id") or uuid(),  # kept if frozen, as by the canvas
                group_id=group_id,
                group_index=index,
                chord=cast(Any, callback),  # the body, as the canvas sends it (stubs say chord)
                **options,
            )
    return group_id


def _declare_queues(app: Celery, producer: Any, header: Sequence[Signature[Any]]) -> set[str]:
    """Declare each queue the header names (by name) once; the names declared.

    Celery declares a message's queue before each publish, through kombu's cache of what a
    connection has declared; each of those checks binds a copy of the queue to the channel
    and wraps the declaration in the connection's retry, which was 8 % of a poller's time
    for a cache hit every time. Here it is one check per queue and batch, with Celery's own
    retry policy; a queue named by a ``Queue`` object, not a name, is left to Celery.
    """
    names = {sig.options.get("queue") for sig in header}
    declared = {name for name in names if isinstance(name, str)}
    policy = app.conf.task_publish_retry_policy or {}
    for name in declared:
        producer.maybe_declare(app.amqp.queues[name], retry=app.conf.task_publish_retry, **policy)
    return declared


#: Options a header signature may carry that the chord itself sets (its id is passed apart).
_CHORD_FIELDS = frozenset({"task_id", "group_id", "group_index", "chord", "producer"})


def set_chord_size(backend: Any, group_id: str, size: int) -> None:
    """Record a new chord's size where the Redis result backend's chord counting reads it.

    toolfan's result backend is always Redis (``TOOLFAN_REDIS_URL``, which the ledger
    shares). Celery's own ``set_chord_size`` takes two round trips: it first deletes the
    count of a chord sent again under the same group id, which a new uuid never is. Here
    it is one SET, with the backend's own key and expiry.
    """
    key = backend.get_key_for_group(group_id, SIZE_SUFFIX)
    backend.client.set(key, size, ex=backend.chord_expires or None)
