"""Redis databases a campaign (the chaos run, the fuzz run) owns for its whole length.

A campaign's figures mean nothing if another run or test flushed or reused its databases
meanwhile, so it flushes them at start and end, leaves a sentinel with its own token in
each, and checks the sentinels before it counts. (A SIGTERM or SIGHUP ends it as an
exception, :func:`dispatcher.devstack.stopped_by_signals`, so its stack is still stopped.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import redis


class DatabasesClobbered(RuntimeError):
    """Something else flushed or wrote over a campaign's Redis databases."""


class OwnedDatabases:
    """Databases of one Redis server, flushed, marked and checked by one campaign."""

    def __init__(self, base_url: str, dbs: Iterable[int], name: str) -> None:
        self.urls = [f"{base_url}/{db}" for db in dbs]
        self.name = name
        self.sentinel = f"{name}:owner"
        self.token = uuid.uuid4().hex

    def flush(self) -> None:
        """Empty every database."""
        for url in self.urls:
            with redis.Redis.from_url(url) as client:
                client.flushdb()

    def mark(self) -> None:
        """Leave the sentinel, to notice if anything else flushes the databases."""
        for url in self.urls:
            with redis.Redis.from_url(url) as client:
                client.set(self.sentinel, self.token)

    def check(self) -> None:
        """Make sure nothing else flushed or reused the databases during the campaign.

        Raises:
            DatabasesClobbered: naming the database, since the figures are then void.
        """
        for url in self.urls:
            with redis.Redis.from_url(url, decode_responses=True) as client:
                owner = client.get(self.sentinel)
            if owner != self.token:
                raise DatabasesClobbered(
                    f"Redis database {url} was flushed or taken over by another process "
                    f"during the {self.name} run (another run or test on the same "
                    "database?); the figures would be meaningless: pick others with --dbs"
                )
