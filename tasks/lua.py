"""A Lua script run by its digest: one ``EVALSHA``, the source sent only when Redis lacks it.

redis-py's ``Script`` does the same, but on every call it also imports its pipeline classes
and checks the client against each (one of them through ``typing``'s protocol check), and
goes through ``evalsha``'s keyword handling: in a py-spy profile of a worker under the
no-op load, that wrapper cost more than a tenth of the ledger's time per call, which runs
two scripts (``begin`` and ``finish``) on every call. The ledger never runs its scripts in
a pipeline, so this runs them on the client's connections directly.

Directly means without the client's command wrapper and its pool's checkout: a script
takes a connection :class:`ScriptConnections` keeps for the ledger's scripts and gives it
back, with no lock, observability record or event on the way. Inside a call's whole
``execute`` that saved 36 us of CPU per call, a tenth of the body (its two scripts;
alternating rounds in one process, 2026-12-05: 368 against 333 us, 372 against 335). What
the wrapper and the pool do for a command is kept: the pool's own check of a connection
before it is used (reconnect one the server closed, or one left with a reply unread), the
connection's retry policy and its disconnect on any error, its health check, and a
reconnect when the server asks for one; and a connection interrupted between its send and
its read is closed, where redis-py left that gap to the pool's check.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError


class Connection(Protocol):
    """What a script uses of a redis-py connection (whose methods are unannotated)."""

    retry: Any

    def connect(self) -> None:
        """Connect, unless connected."""

    def disconnect(self) -> None:
        """Close the socket; the next command connects again."""

    def can_read(self) -> bool:
        """Whether the socket has something to read (unread reply, or closed)."""

    def send_command(self, *args: Any) -> None:
        """Send one command."""

    def read_response(self) -> Any:
        """Read one reply."""


class ScriptConnections:
    """Connections of one client's pool, kept for scripts and shared by every thread.

    A script takes one (the most recently used) and gives it back when its reply is read,
    so there are never more than scripts running at once; each is checked out of the pool
    once, and stays checked out. ``list.pop`` and ``list.append`` need no lock: each is
    one step for the interpreter. A forked child starts with none: its parent's sockets are
    not its own, and the pool resets itself in the child too. Once this object is gone, its
    connections go back to the pool.
    """

    __slots__ = ("__weakref__", "_idle", "_pid", "_pool", "_ready")

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._idle: list[Connection] = []
        self._pid = os.getpid()
        #: The pool's check of a connection before use; redis-py before 8 had it inline only.
        self._ready: Callable[[Connection], None] = (
            getattr(self._pool, "ensure_connection", None) or ready_as_before
        )
        weakref.finalize(self, _give_back, self._pool, self._idle)

    def run(self, *command: Any) -> Any:
        """Send ``command`` on a kept connection and return its reply.

        Raises:
            redis.RedisError: as the client would raise it.
        """
        conn = self._take()
        try:
            return conn.retry.call_with_retry(
                lambda: _send_and_read(conn, command), lambda error: conn.disconnect()
            )
        finally:
            if _should_reconnect(conn):
                conn.disconnect()  # the next take connects again
            self._idle.append(conn)

    def _take(self) -> Connection:
        if self._pid != os.getpid():
            self._idle.clear()
            self._pid = os.getpid()
        try:
            conn = self._idle.pop()
        except IndexError:
            fresh: Connection = self._pool.get_connection()  # connected and checked
            return fresh
        try:
            self._ready(conn)
        except BaseException:
            self._idle.append(conn)  # disconnected; the next take tries it again
            raise
        return conn


def script_connections(client: redis.Redis) -> ScriptConnections | None:
    """Kept connections for ``client``'s scripts; None for a client whose pool is not plain.

    A client on one connection of its own (``single_connection_client``) or with a
    client-side cache keeps the wrapper's path: the first has no pool to take from, the
    second hands out connections that answer from the cache.
    """
    pool = client.connection_pool
    if getattr(client, "connection", None) is not None or getattr(pool, "cache", None):
        return None
    return ScriptConnections(client)


def _give_back(pool: Any, idle: list[Connection]) -> None:
    """Return kept connections to their pool (which ignores those of another process)."""
    while idle:
        pool.release(idle.pop())


def _send_and_read(conn: Connection, command: tuple[Any, ...]) -> Any:
    """One command's reply; a connection interrupted anywhere after the send is closed.

    redis-py closes it on an error inside the send or the read, not between the two: an
    exception raised there (a signal's, a timeout's) would leave the reply unread, to be
    taken for the next command's.
    """
    try:
        conn.send_command(*command)
        return conn.read_response()
    except ResponseError:  # Redis answered (NOSCRIPT, a script's error): the reply is read
        raise
    except BaseException:
        conn.disconnect()
        raise


def _should_reconnect(conn: Connection) -> bool:
    should: Callable[[], bool] | None = getattr(conn, "should_reconnect", None)
    return bool(should and should())


def ready_as_before(conn: Connection) -> None:
    """Make ``conn`` fit to send a command, as redis-py's ``get_connection`` did before 8.

    A connection the server closed, or one left with a reply unread (an exception between
    a send and its read), reads as readable: it is connected again.
    """
    conn.connect()
    try:
        if conn.can_read():
            raise RedisConnectionError("Connection has data")
    except (RedisConnectionError, TimeoutError, OSError):
        conn.disconnect()
        conn.connect()
        if conn.can_read():
            raise RedisConnectionError("Connection not ready") from None


class LuaScript:
    """One script on one client; call it with its keys and arguments.

    Given ``connections`` (of that client), it runs on those; otherwise through the client.
    """

    __slots__ = ("client", "connections", "sha", "source")

    def __init__(
        self, client: redis.Redis, source: str, connections: ScriptConnections | None = None
    ) -> None:
        self.client = client
        self.source = source
        self.connections = connections
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
        if self.connections is not None:
            return self.connections.run("EVALSHA", self.sha, len(keys), *keys, *args)
        command = self.client.execute_command  # redis-py leaves it unannotated
        return command("EVALSHA", self.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
