"""The suite flushes only a Redis it started, or the one TOOLFAN_TEST_REDIS_URL names."""

from __future__ import annotations

import os

import redis


def test_the_suite_s_redis_is_its_own_private_server_unless_one_is_named():
    client = redis.Redis.from_url(os.environ["TOOLFAN_REDIS_URL"], decode_responses=True)
    named = os.environ.get("TOOLFAN_TEST_REDIS_URL")
    if named:
        assert os.environ["TOOLFAN_REDIS_URL"].startswith(named.rsplit("/", 1)[0])
        return
    # devstack.private_redis runs its server in a "toolfan-redis-" temporary directory.
    assert "toolfan-redis-" in client.config_get("dir")["dir"]
