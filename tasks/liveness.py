"""Liveness: which workers are alive, what each holds, and redoing what a dead one left.

When a whole worker dies (SIGKILL of its process group, an OOM kill, a node lost), the
Redis transport keeps the messages it had taken in its ``unacked`` hash and gives them back
only at the visibility timeout, an hour; until now a session waited for its claim's lease
(six and a half minutes with the defaults). Instead:

* Every worker's main process beats every ``TOOLFAN_HEARTBEAT`` seconds, from a thread of
  its own (a busy tool runs in a pool process or another thread, so it cannot hold it up):
  its last beat goes into the ``toolfan:workers`` sorted set, and the delivery tags of the
  messages it holds (received or running) into a short-lived set of its own.
* A message older than ``TOOLFAN_DEAD_AFTER`` that no live worker holds is an *orphan*:
  its worker died with it, started or not. :class:`Reaper` puts it back on its queue with
  the transport's own restore (what the visibility timeout would do, an hour early), so the
  call runs again as the very task its chord waits for, and the chord stays whole. Every
  worker's heartbeat thread reaps, one at a time under a short lock, and so does every
  poll pass: whichever comes first.
* A call record names the worker that last began it. A redelivered message whose call is
  running on a live worker elsewhere waits for that worker's result instead of running it
  a second time (a broker that redelivers on a dropped connection, RabbitMQ, does that).

RabbitMQ gives a dead consumer's messages back as soon as its connection drops, so there
the reaper has nothing to restore; heartbeats and the begin check still apply.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import redis

from tasks import keys, metrics

log = logging.getLogger("toolfan.liveness")

#: This process's worker main pid: itself, or (in a prefork pool process) its parent.
MAIN_PID = os.getpid()

#: Seconds a dead worker stays listed (for ``toolfan status``) before it is forgotten.
FORGET_AFTER = 3600.0


def identity(hostname: str, pid: int) -> str:
    """A worker's name in the ledger: its node name and its main process's pid."""
    return f"{hostname}#{pid}"


def runner(hostname: str) -> str:
    """What a call record names as running it: the worker, then the process (``w/pid``)."""
    return f"{identity(hostname, MAIN_PID)}/{os.getpid()}"


def worker_of(runner_name: str) -> str:
    """The worker part of a call record's runner."""
    return runner_name.rsplit("/", 1)[0]


def runs(client: redis.Redis, runner_name: str, me: str, dead_after: float) -> bool:
    """Whether the process ``runner_name`` names still runs (seen from runner ``me``).

    A sibling pool process of the same worker is checked directly (it shares this host);
    another worker by its heartbeat.
    """
    worker = worker_of(runner_name)
    pid = runner_name[len(worker) + 1 :]
    if worker == worker_of(me):
        return pid.isdigit() and _process_exists(int(pid))
    return alive(client, worker, dead_after)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def held_tags(consumer: Any) -> list[str]:
    """The delivery tags of the messages this worker holds: taken and not yet acked.

    Read from the consumer channel's own bookkeeping, which holds every message the worker
    took, whether it runs, waits for a pool slot, or waits for its ETA (a submit's retry
    countdown): exactly what it would give back if it shut down cleanly.
    """
    qos = getattr(getattr(getattr(consumer, "task_consumer", None), "channel", None), "qos", None)
    delivered = getattr(qos, "_delivered", None)
    if delivered is None:
        return []
    for _ in range(5):  # the consumer's thread changes these while we read them
        try:
            taken, acked = list(delivered), set(getattr(qos, "_dirty", ()))
        except RuntimeError:
            continue
        return sorted(t for t in taken if isinstance(t, str) and t not in acked)
    return []


@dataclass
class Beat:
    """One worker's heartbeat: who it is, and how often and how long it counts as alive."""

    client: redis.Redis
    worker: str
    every: float
    dead_after: float

    def send(self, tags: Iterable[str]) -> None:
        """Say this worker is alive and holds ``tags``."""
        held = keys.held(self.worker)
        pipe = self.client.pipeline(transaction=True)
        pipe.zadd(keys.WORKERS, {self.worker: time.time()})
        pipe.delete(held)
        tags = list(tags)
        if tags:
            pipe.sadd(held, *tags)
            pipe.expire(held, int(self.dead_after * 3) + 1)
        pipe.execute()

    def leave(self) -> None:
        """Say this worker stopped (a clean shutdown): no one waits for it to look dead."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(keys.WORKERS, self.worker)
        pipe.delete(keys.held(self.worker))
        pipe.execute()


def alive(client: redis.Redis, worker: str, dead_after: float) -> bool:
    """Whether ``worker`` beat within the last ``dead_after`` seconds."""
    beat = client.zscore(keys.WORKERS, worker)
    return beat is not None and beat >= time.time() - dead_after


@dataclass(frozen=True)
class Fleet:
    """The workers the ledger knows, split by whether they still beat."""

    alive: list[str]
    dead: list[str]


def fleet(client: redis.Redis, dead_after: float) -> Fleet:
    """Live and dead workers (dead ones are listed for an hour after their last beat)."""
    cutoff = time.time() - dead_after
    beats = cast(list[tuple[Any, float]], client.zrange(keys.WORKERS, 0, -1, withscores=True))
    live = [_text(w) for w, at in beats if at >= cutoff]
    dead = [_text(w) for w, at in beats if at < cutoff]
    return Fleet(live, dead)


class Reaper:
    """Puts back on their queues the messages of workers that died holding them.

    Args:
        ledger: The ledger's Redis (heartbeats, held tags, the reap lock).
        broker: A kombu connection to the broker; only the Redis transport keeps its
            unacknowledged messages where a reaper can reach them.
        dead_after: Seconds without a heartbeat after which a worker is dead.
    """

    def __init__(self, ledger: redis.Redis, broker: Any, dead_after: float, every: float) -> None:
        self.ledger = ledger
        self.broker = broker
        self.dead_after = dead_after
        self.every = every

    def reap(self) -> int:
        """Restore every orphaned message; how many were.

        One reaper a heartbeat period, fleet-wide: whoever takes the short lock first (it
        simply runs out, so a reaper that died holding it blocks no one for long).
        """
        channel = self._channel()
        if channel is None:
            return 0
        if not self.ledger.set(keys.REAPING, os.getpid(), nx=True, px=int(self.every * 1000)):
            return 0
        return self._restore(channel, self._orphans(channel))

    def last_death(self) -> float | None:
        """When the most recently dead worker last beat (within the hour), or None."""
        cutoff = time.time() - self.dead_after
        dead = cast(
            list[tuple[Any, float]],
            self.ledger.zrangebyscore(keys.WORKERS, "-inf", cutoff, withscores=True),
        )
        return max((at for _, at in dead), default=None)

    def queued(self, queue: str) -> int | None:
        """Messages waiting on ``queue``, or None when the broker cannot say cheaply."""
        channel = self._channel()
        return int(channel.client.llen(queue)) if channel is not None else None

    def _channel(self) -> Any:
        channel = self.broker.default_channel
        return channel if hasattr(channel, "unacked_index_key") else None

    def _orphans(self, channel: Any) -> list[str]:
        """Messages taken longer ago than ``dead_after`` that no live worker holds."""
        now = time.time()
        old = channel.client.zrangebyscore(channel.unacked_index_key, "-inf", now - self.dead_after)
        if not old:
            return []
        live = fleet(self.ledger, self.dead_after).alive
        held: set[str] = set()
        if live:
            pipe = self.ledger.pipeline(transaction=False)
            for worker in live:
                pipe.smembers(keys.held(worker))
            for members in pipe.execute():
                held.update(str(m) for m in members)
        return [tag for tag in (_text(t) for t in old) if tag not in held]

    def _restore(self, channel: Any, tags: list[str]) -> int:
        for tag in tags:
            channel.qos.restore_by_tag(tag, client=channel.client, leftmost=True)
            log.warning("restored message %s: the worker that held it is gone", tag)
        if tags:
            metrics.ORPHANS.inc(len(tags))
            self.ledger.incrby(keys.ORPHANS_REDONE, len(tags))
        self._forget_the_long_dead()
        return len(tags)

    def _forget_the_long_dead(self) -> None:
        self.ledger.zremrangebyscore(keys.WORKERS, "-inf", time.time() - FORGET_AFTER)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Heart:
    """The heartbeat thread of a worker's main process; it reaps between beats too."""

    def __init__(self, beat: Beat, reaper: Reaper | None, consumer: Any) -> None:
        self.beat = beat
        self.reaper = reaper
        self.consumer = consumer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toolfan-heartbeat", daemon=True)

    def start(self) -> None:
        """Beat at once, then every ``beat.every`` seconds, until :meth:`stop`."""
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and say so, so the worker is not taken for dead."""
        self._stop.set()
        self._thread.join(timeout=self.beat.every + 5)
        try:
            self.beat.leave()
        except redis.RedisError as exc:
            log.warning("could not say this worker stopped: %s", exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._once()
            self._stop.wait(self.beat.every)

    def _once(self) -> None:
        try:
            self.beat.send(held_tags(self.consumer))
            metrics.WORKERS_ALIVE.set(len(fleet(self.beat.client, self.beat.dead_after).alive))
            if self.reaper is not None:
                self.reaper.reap()
        except Exception as exc:  # a broken beat must not end the thread: the next may work
            log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
