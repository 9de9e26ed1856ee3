"""Moving the ledger of the version before sources into the current key layout.

Before sources, every key belonged to Agents sessions and had no source or version:
``toolfan:call:{sess}:turn:call``, ``toolfan:claim:{sess}``, ``toolfan:dispatch:{sess}``.
Those records still matter after an upgrade: a call saved but not yet submitted must not
run again, and a batch refused for good must stay abandoned. So the first worker or poller
of this version renames each such key to its place in the current layout
(``toolfan:v2:agents:...``): the same hash, the same TTL, the same Redis Cluster slot (the
batch's hash tag is unchanged), moved by ``RENAMENX`` so a record this version already
wrote is never overwritten. Then :data:`tasks.keys.SCHEMA` records that the ledger is in
the current layout, and later starts skip the scan.

Records an old worker writes after the move are not seen, which is why an upgrade stops
the old fleet first (the README's upgrade steps).
"""

from __future__ import annotations

import logging
import os
import time

import redis

from tasks import keys
from tasks.envelope import LEGACY_SOURCE

log = logging.getLogger("toolfan.upgrade")

#: Lock held while one process moves the keys, so two starts do not scan twice.
LOCK = f"{keys.PREFIX}:upgrading"
LOCK_MS = 600_000


def upgrade_ledger(client: redis.Redis, *, force: bool = False) -> int | None:
    """Move every legacy key into the current layout; how many moved (None: another did).

    Args:
        client: The ledger's Redis.
        force: Scan even when the ledger says it was upgraded already.
    """
    if not force and client.get(keys.SCHEMA) == keys.VERSION:
        return 0
    if not client.set(LOCK, os.getpid(), nx=True, px=LOCK_MS):
        _wait_for_the_other(client)
        return None
    try:
        moved = sum(_move_kind(client, kind) for kind in keys.LEGACY_KINDS)
        client.set(keys.SCHEMA, keys.VERSION)
    finally:
        client.delete(LOCK)
    if moved:
        log.warning("ledger upgraded: %d record(s) of the previous version moved", moved)
    return moved


def _wait_for_the_other(client: redis.Redis) -> None:
    """Wait while another process moves the keys: reading before it is done would miss some."""
    deadline = time.monotonic() + LOCK_MS / 1000
    while client.exists(LOCK) and client.get(keys.SCHEMA) != keys.VERSION:
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)


def ensure_upgraded(client: redis.Redis) -> None:
    """Upgrade the ledger unless it is already (one GET when it is); never raises.

    Run once by every process before it first uses the ledger. When Redis cannot be
    reached now, the ledger's own calls will say so; the next process start upgrades.
    """
    try:
        upgrade_ledger(client)
    except redis.RedisError as exc:
        log.warning("could not check the ledger's layout: %s: %s", type(exc).__name__, exc)


def _move_kind(client: redis.Redis, kind: str) -> int:
    moved = 0
    pattern = f"{keys.PREFIX}:{kind}:{{*"
    for raw in client.scan_iter(match=pattern, count=1000):
        old = raw.decode() if isinstance(raw, bytes) else str(raw)
        new = keys.upgraded(old, LEGACY_SOURCE)
        if client.renamenx(old, new):
            moved += 1
        else:
            log.warning("ledger upgrade: %s kept, %s is newer", new, old)
            client.delete(old)
    return moved
