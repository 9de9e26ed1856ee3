"""Checking the Redis and broker URLs of the settings, without ever echoing them.

A URL from the environment may hold a password, and a malformed one must still be
refused by name rather than by a traceback deep in redis-py or kombu (which raised from
``Redis.from_url`` and even from kombu's ``maybe_sanitize_url``). Their own messages can
quote the part they could not read: ``redis://:pass/word@host`` makes redis-py say the
port ``'pass'`` is not a number. So each problem is told in words of its own.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from redis.connection import parse_url

#: The schemes redis-py's ``from_url`` reads (the ledger's client).
REDIS_SCHEMES = ("redis", "rediss", "unix")
_PORT = "a port is not a number from 0 to 65535"


def redis_url_problem(url: str) -> str | None:
    """What keeps ``url`` from being a Redis URL the ledger's client can use, or None."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in REDIS_SCHEMES:
        return "not a Redis URL: it must start with redis://, rediss:// or unix://"
    try:
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        return f"not a Redis URL: {_PORT}" if "port" in str(exc).lower() else "not a Redis URL"
    return None


def broker_url_problem(url: str) -> str | None:
    """What keeps ``url`` (kombu's, ``;`` between failover URLs) from being read, or None."""
    for part in (p.strip() for p in url.split(";")):
        try:
            split = urlsplit(part)
            _ = split.port  # reads (and range-checks) the port
        except ValueError:
            return f"not a broker URL: {_PORT}"
        if not split.scheme or "://" not in part:
            return "not a broker URL: it names no transport (amqp://, redis://, ...)"
        if split.scheme.lower() in REDIS_SCHEMES:
            problem = redis_url_problem(part)
            if problem is not None:
                return problem.replace("Redis URL", "broker URL")
    return None
