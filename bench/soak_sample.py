"""One sample of the soak's time series: process memory, Redis memory, keys, pub/sub, clients.

Each sample is cheap enough to take every few seconds under load: RSS from ``/proc``
(psutil), a handful of Redis ``INFO`` and ``PUBSUB`` commands, and one ``SCAN`` with a
pipelined ``TTL`` per key, so a key written without a TTL shows up within one interval.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil
import redis

#: Broker keys that hold a queue's messages or the unacked bookkeeping: no TTL by design,
#: and there or not with the load (an empty list does not exist), so never a leak signal.
LOAD_PATTERNS = re.compile(r"^(fn\.|toolfan\.|celery$|unacked)")
_BRACED = re.compile(r"\{[^}]*\}")
_HEX = re.compile(r"[0-9a-f]{6,}(-[0-9a-f]{4,})*")
_DIGITS = re.compile(r"\d+")


def pattern(key: str) -> str:
    """The key with its ids replaced: ``toolfan:v2:agents:call:{*}:*`` for every call record.

    Batch ids are in braces; worker names end in hex and pids; counting keys per pattern
    makes one that grows (a leak) stand out from the persistent few.
    """
    if ":call:" in key or ":claim:" in key or ":dispatch:" in key:
        return _BRACED.sub("{*}", key.split("}", 1)[0] + "}") + ":*"
    text = _BRACED.sub("{*}", key)
    text = _HEX.sub("<hex>", text)
    return _DIGITS.sub("#", text)


def tree(pid: int, descendants: bool = True) -> list[psutil.Process]:
    """A process and its live descendants (a prefork pool's children); none once it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)] if descendants else [root]
    except psutil.NoSuchProcess:
        return []


def rss(pid: int) -> int:
    """Resident bytes of a process and its live descendants (a prefork pool's children)."""
    total = 0
    for proc in tree(pid):
        try:
            total += int(proc.memory_info().rss)
        except psutil.NoSuchProcess:
            continue
    return total


@dataclass(frozen=True)
class KeyCensus:
    """A database's key count, and its keys without a TTL by pattern."""

    size: int
    persistent: dict[str, int]

    def unexpected(self) -> int:
        """Keys without a TTL other than the queues, unacked bookkeeping and watched runs."""
        return sum(n for p, n in self.persistent.items() if not by_design(p))


def by_design(name: str) -> bool:
    """Whether a pattern of keys without a TTL comes and goes with the load by design.

    The broker's queues and unacked bookkeeping, and the ledger's hash of watched runs:
    one key, there while any run is watched (an empty hash does not exist). What would
    leak is that hash's fields, one per run never dropped: the soak counts them
    (:func:`watched_runs`) and judges them apart.
    """
    return bool(LOAD_PATTERNS.match(name)) or name == pattern(_watches())


def _watches() -> str:
    """The watches hash's key (imported late: it loads toolfan's settings)."""
    from dispatcher.sources.assistants_watch import WATCHES

    return WATCHES


def watched_runs(client: redis.Redis) -> int:
    """Runs toolfan watches now: the fields of the watches hash (one per run in flight)."""
    return int(client.hlen(_watches()))


def census(client: redis.Redis, batch: int = 1000) -> KeyCensus:
    """``DBSIZE`` and every key with ``TTL`` -1, counted per :func:`pattern`."""
    found: Counter[str] = Counter()
    keys: list[bytes] = []
    for key in client.scan_iter(count=batch):
        keys.append(key)
        if len(keys) >= batch:
            found.update(_no_ttl(client, keys))
            keys = []
    found.update(_no_ttl(client, keys))
    return KeyCensus(int(client.dbsize()), dict(found))


def _no_ttl(client: redis.Redis, keys: list[bytes]) -> Iterable[str]:
    if not keys:
        return []
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.ttl(key)
    ttls = pipe.execute()
    return [pattern(k.decode(errors="replace")) for k, t in zip(keys, ttls, strict=True) if t == -1]


def pubsub(client: redis.Redis) -> dict[str, int]:
    """Channels with subscribers, subscriptions to them, and pattern subscriptions."""
    channels = client.pubsub_channels()
    subscribers = sum(n for _, n in client.pubsub_numsub(*channels)) if channels else 0
    return {
        "channels": len(channels),
        "subscriptions": int(subscribers),
        "patterns": int(client.pubsub_numpat()),
    }


def clients(client: redis.Redis, dbs: Iterable[int]) -> dict[str, int]:
    """Connections: the whole server's, and those on the given databases."""
    ours = set(dbs)
    listed: list[dict[str, Any]] = client.client_list()
    return {
        "server": int(client.info("clients")["connected_clients"]),
        "ours": sum(1 for c in listed if int(c["db"]) in ours),
    }


def connections(
    trees: Mapping[str, int], port: int, alone: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Established TCP connections to ``port`` per role.

    A role of ``trees`` counts its process and all its descendants (a prefork pool's
    children); one of ``alone`` its process only (the bench, whose children are the fleet).
    The server's own count says the fleet holds more connections; this says whose pool
    grew.
    """
    roles = [(role, tree(pid)) for role, pid in trees.items()]
    roles += [(role, tree(pid, descendants=False)) for role, pid in (alone or {}).items()]
    return {role: sum(_to_port(proc, port) for proc in procs) for role, procs in roles}


def _to_port(proc: psutil.Process, port: int) -> int:
    try:
        held = proc.net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0
    return sum(
        1 for c in held if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def redis_sample(client: redis.Redis, databases: Mapping[str, redis.Redis]) -> dict[str, Any]:
    """Redis's part of a sample; ``databases`` maps a role (broker, ledger) to its client."""
    memory = client.info("memory")
    keys = {role: census(db) for role, db in databases.items()}
    keyspace = {k: int(v["keys"]) for k, v in client.info("keyspace").items()}
    return {
        "used_memory": int(memory["used_memory"]),
        "keys": {role: c.size for role, c in keys.items()},
        "no_ttl": {role: c.persistent for role, c in keys.items()},
        "no_ttl_unexpected": sum(c.unexpected() for c in keys.values()),
        "watched_runs": watched_runs(databases["ledger"]),
        "pubsub": pubsub(client),
        "clients": clients(client, [_db(db) for db in databases.values()]),
        "keyspace": keyspace,
    }


def _db(client: redis.Redis) -> int:
    return int(client.connection_pool.connection_kwargs.get("db", 0))
