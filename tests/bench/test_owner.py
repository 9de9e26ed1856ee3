"""Two benches never measure on the same Redis databases at once."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from bench.config import BenchConfig
from bench.stack import OWNER_KEY, BenchStack, DatabasesInUse, owned


def _stack(url: str, tmp_path: Path) -> BenchStack:
    base = url.rsplit("/", 1)[0]
    # Both on the suite's results database, flushed for every test anyway: the broker's
    # (14) holds the suite workers' queues and bindings.
    stack = BenchStack(BenchConfig(redis_url=url, broker_db=15, ledger_db=15), tmp_path)
    stack.base = base
    return stack


def test_a_second_bench_on_the_same_databases_stops_saying_why(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    kwargs = redis_client.connection_pool.connection_kwargs
    base = f"redis://{kwargs['host']}:{kwargs['port']}/15"
    first, second = _stack(base, tmp_path), _stack(base, tmp_path)
    with owned(first):
        assert redis_client.ttl(OWNER_KEY) > 0
        with pytest.raises(DatabasesInUse, match="--private-redis"), owned(second):
            pytest.fail("the second bench got in")
        # The refused bench flushed nothing: the owner's key is still there.
        assert redis_client.exists(OWNER_KEY)
    # Once the first is done, the databases are free again.
    assert not redis_client.exists(OWNER_KEY)
    with owned(second):
        pass
