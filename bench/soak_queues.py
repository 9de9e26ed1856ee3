"""The broker's queue depths once a second, so a slow stretch of a soak shows where calls waited.

The soak's samples come every ten seconds and its p95 per minute; a stretch where calls
waited seconds says nothing of *where* they waited (a function's queue, the submit queue,
messages taken but not acked) unless the queues were looked at while it lasted. A thread
of its own reads every queue's length once a second (one ``SCAN`` of the broker's small
database and one pipelined ``LLEN`` per queue), so the main loop's blocking steps (a
worker restarted, a poller waited for) leave no gap in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from bench.soak_sample import LOAD_PATTERNS

#: kombu's Redis transport keeps a queue's messages of priority ``p`` under
#: ``<queue>\x06\x16<p>``; the depths add those up under the queue's own name.
PRIORITY_SEP = "\x06\x16"
#: The hash of messages handed to a worker and not yet acked (kombu's Redis transport).
UNACKED = "unacked"
#: Seconds between two looks at the queues.
EVERY = 1.0


def queue_name(key: str) -> str:
    """The queue a broker key belongs to: its priority suffix dropped."""
    return key.split(PRIORITY_SEP, 1)[0]


def queue_depths(broker: redis.Redis) -> dict[str, int]:
    """Messages waiting in each queue that holds any, and ``unacked``: taken, not yet acked.

    An empty queue has no key, so it is absent rather than 0.
    """
    names = (_text(key) for key in broker.scan_iter(count=1000))
    keys = [key for key in names if LOAD_PATTERNS.match(key)]
    queues = [k for k in keys if not k.startswith(UNACKED)]
    pipe = broker.pipeline(transaction=False)
    for key in queues:
        pipe.llen(key)
    pipe.hlen(UNACKED)
    replies = pipe.execute(raise_on_error=False)
    depths: dict[str, int] = {}
    for key, reply in zip(queues, replies, strict=False):
        if isinstance(reply, int) and reply:  # not a list (WRONGTYPE), or emptied meanwhile
            name = queue_name(key)
            depths[name] = depths.get(name, 0) + reply
    unacked = replies[-1]
    if isinstance(unacked, int) and unacked:
        depths[UNACKED] = unacked
    return depths


def _text(key: bytes | str) -> str:
    return key.decode(errors="replace") if isinstance(key, bytes) else key


def peaks(points: Iterable[dict[str, Any]], start: float, end: float) -> dict[str, int]:
    """Each queue's deepest reading at ``start < t <= end``."""
    out: dict[str, int] = {}
    for point in points:
        if start < point["t"] <= end:
            for name, depth in point["depths"].items():
                out[name] = max(out.get(name, 0), depth)
    return out


def deepest(depths: dict[str, int], count: int = 3) -> str:
    """The ``count`` deepest queues, as ``name depth`` pairs (``-`` when all were empty)."""
    top = sorted(depths.items(), key=lambda item: (-item[1], item[0]))[:count]
    return ", ".join(f"{name} {depth:,}" for name, depth in top) or "-"


class QueueWatch:
    """Reads the queue depths every :data:`EVERY` seconds in a daemon thread until stopped.

    Attributes:
        points: ``{"t": seconds since zero, "depths": {queue: messages}}``, oldest first.
        errors: Looks that failed (Redis busy or restarting); the watch goes on.
    """

    def __init__(self, url: str, zero: float, every: float = EVERY) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=5)
        self._zero = zero
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-queues", daemon=True)
        self._lock = threading.Lock()
        self.points: list[dict[str, Any]] = []
        self.errors = 0

    def start(self) -> None:
        """Begin reading; the first reading is taken at once."""
        self._thread.start()

    def stop(self) -> None:
        """Stop reading and close the client; :attr:`points` stays."""
        self._stop.set()
        self._thread.join(timeout=10)
        self._client.close()

    def snapshot(self) -> Sequence[dict[str, Any]]:
        """The readings so far (a copy: the thread keeps appending)."""
        with self._lock:
            return list(self.points)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                depths = queue_depths(self._client)
            except redis.RedisError:
                self.errors += 1
            else:
                with self._lock:
                    self.points.append({"t": time.monotonic() - self._zero, "depths": depths})
            self._stop.wait(self._every)
