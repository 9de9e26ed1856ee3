"""A Lua script run by its digest: one ``EVALSHA``, the source sent only when Redis lacks it.

redis-py's ``Script`` does the same, but on every call it also imports its pipeline classes
and checks the client against each (one of them through ``typing``'s protocol check), and
goes through ``evalsha``'s keyword handling: in a py-spy profile of a worker under the
no-op load, that wrapper cost more than a tenth of the ledger's time per call, which runs
two scripts (``begin`` and ``finish``) on every call. The ledger never runs its scripts in
a pipeline, so this runs them on the client directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError


class LuaScript:
    """One script on one client; call it with its keys and arguments."""

    __slots__ = ("client", "sha", "source")

    def __init__(self, client: redis.Redis, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's digest

    def __call__(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The script's reply.

        A Redis that restarted, failed over or was flushed with ``SCRIPT FLUSH`` has lost
        the script: it is loaded again, once, and run.

        Raises:
            redis.RedisError: whatever Redis or the connection raised.
        """
        try:
            return self._evalsha(keys, args)
        except NoScriptError:
            self.sha = self.client.script_load(self.source)
            return self._evalsha(keys, args)

    def _evalsha(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        command = self.client.execute_command  # redis-py leaves it unannotated
        return command("EVALSHA", self.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
