"""The bell that wakes a polling loop when runs are newly watched.

A run named to toolfan (``toolfan runs watch``, :func:`toolfan.watch_runs`,
``POST /runs/watch``) waits for the poller's next pass to be read: up to a whole
``--interval`` (and an interval of a minute is a sane choice for a fleet of long runs).
Every watch that adds a run also publishes one message on :data:`WAKE`; a looping poller
listens there on a thread of its own and, rung, reads the newly watched runs at once
(:meth:`~dispatcher.sources.assistants_poll.RunsPoller.poll_new`), while the runs it
already knows keep their schedule. So a storm of watches costs API reads of the new runs
only, never extra reads of every run; each woken pass reads the watch list once (an
``HGETALL``), and the loop leaves ``WAKE_GAP`` (50 ms) between them.

The bell is a shortcut, never the only way: a message lost while Redis is away, or a
listener that cannot subscribe, leaves the run to the next pass, as before. The listener
reconnects by itself, with a growing pause, and says once that it lost its connection.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import redis

from dispatcher.sources.assistants import NAME
from tasks import keys

log = logging.getLogger("toolfan.poll")

#: The channel a watch that adds runs publishes on (in the ledger's Redis).
WAKE = f"{keys.scope(NAME)}:wake"
#: Seconds the listener waits for a message before it looks whether it should stop.
LISTEN_FOR = 1.0
#: First and longest pause before the listener subscribes again after losing Redis.
RECONNECT = (0.5, 10.0)


def ring(client: redis.Redis) -> None:
    """Wake the looping pollers: runs were newly watched (one ``PUBLISH``).

    Best effort: the watches are saved already, and the next pass reads them if this
    message is lost, so a failure here is no failure of the watch.
    """
    try:
        client.publish(WAKE, b"")
    except redis.RedisError as exc:
        log.debug("could not wake the runs pollers: %s: %s", type(exc).__name__, exc)


class Bell:
    """Rung by a message on :data:`WAKE` (or by :meth:`ring`); waited on by the loop."""

    def __init__(self, client: redis.Redis, channel: str = WAKE) -> None:
        self.client = client
        self.channel = channel
        self._rung = threading.Event()
        self._closed = threading.Event()
        self._subscribed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Bell:
        """Listen on a daemon thread (it dies with the process); returns this bell."""
        self._thread = threading.Thread(target=self._listen, name="toolfan-wake", daemon=True)
        self._thread.start()
        return self

    def ring(self) -> None:
        """Wake the waiter (a message came, or the loop must stop)."""
        self._rung.set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a ring; True if rung (and now cleared)."""
        rung = self._rung.wait(timeout)
        self._rung.clear()
        return rung

    def subscribed(self, timeout: float) -> bool:
        """Whether the listener holds its subscription, waiting up to ``timeout`` seconds."""
        return self._subscribed.wait(timeout)

    def close(self) -> None:
        """Stop listening (within :data:`LISTEN_FOR`)."""
        self._closed.set()

    def _listen(self) -> None:
        pause, longest = RECONNECT
        lost = False
        while not self._closed.is_set():
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.channel)
                self._subscribed.set()
                if lost:  # a run watched while Redis was away published into the void
                    log.info("runs poller: listening for newly watched runs again")
                    self.ring()
                lost, pause = False, RECONNECT[0]
                while not self._closed.is_set():
                    if pubsub.get_message(timeout=LISTEN_FOR) is not None:
                        self.ring()
            except (redis.RedisError, OSError) as exc:
                self._subscribed.clear()
                if not lost:
                    log.warning(
                        "runs poller: lost the channel of newly watched runs (%s: %s); they "
                        "are read on the next pass until it is back",
                        type(exc).__name__,
                        exc,
                    )
                lost = True
                self._closed.wait(pause)
                pause = min(2 * pause, longest)
            finally:
                _close(pubsub)


def _close(pubsub: redis.client.PubSub) -> None:
    with contextlib.suppress(redis.RedisError, OSError):  # its connection is gone already
        pubsub.close()
