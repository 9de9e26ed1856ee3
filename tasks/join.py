"""The join of a batch's chord: each ``execute`` counted in one short script, no claim trip.

Every call of a batch is a header task of one chord, and when each finishes the result
backend counts it; the last one sends the chord's callback, ``submit``. Celery's Redis
backend does that per header task with one script of a dozen commands (a done marker, a
set of the parts seen, five EXPIREs, the size and its adjustment read), and the part that
completes the chord then makes four more round trips before and after it sends the
callback: a read of a saved group (toolfan's chords never save one), a read of the results,
a claim extended, and a cleanup. With five calls a batch that was 16 Redis commands per
call, two fifths of all of toolfan's, and nine round trips per batch from the workers.

toolfan's ``execute`` parts go through :data:`JOIN` instead: one script that adds the
result, counts, and on the last part claims the callback for that part's task and returns
every result in the same step; the callback is sent after it, and the chord's results and
size deleted and its claim marked done. That is about seven commands per call and six
round trips per batch (one per part and the cleanup). The keys and the encoding are
Celery's own (the results in a sorted set scored by each part's index, the size where
:mod:`tasks.publish` writes it, the claim and its ``done`` marker where Celery's script
looks for them), so a chord whose parts meet workers of both kinds (a fleet half
upgraded) still completes once. Every other task's chord (a user's own
tasks on the same workers) goes through Celery's code as before, unless its header task is
named to :func:`join_chords_of` (the bench's floor is, so that it stays the least any
implementation does).

Where the ledger shares the result backend's Redis database (the default), ``execute``
counts its part as it saves its result, in one script (the ledger's FINISH, then
:data:`JOIN`, see :func:`tasks.scripts.finish_then`): a round trip less per call, the
priciest step of a call on a threads pool. It marks the task's request
(:func:`counted`), and the backend, handed the part after the task returns, does not count
it again: it only sends the callback if that part completed the chord.

What the claim's owner is for: a worker that dies after the last part's script and
before its callback is out has its message delivered again (late acks), under the same
task id; that copy finds the results still there and the claim its own, and sends the
callback. A callback sent twice that way is harmless: a batch's delivery is idempotent.
A copy of a part that arrives once the chord is done finds the marker (Celery's, for five
minutes) and writes nothing. A part may also finish before the chord's size is written
(Celery's canvas writes it as it sends the last part; toolfan before the first): it is
kept, and counted once the size is there.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import states
from celery.backends.redis import RedisBackend
from celery.canvas import maybe_signature
from celery.exceptions import ChordError

from handlers.runner import where
from tasks.lua import LuaScript, script_connections
from tasks.publish import SIZE_SUFFIX
from tasks.queues import EXECUTE_TASK

log = logging.getLogger("toolfan.join")

#: The results of a chord so far, scored by each part's index (Celery's suffix).
RESULTS_SUFFIX = ".j"
#: Who sends a complete chord's callback (Celery's suffix, so its script sees the claim too).
CLAIM_SUFFIX = ".c"
#: Seconds a claim on a complete chord's callback holds: its owner sends it well within.
CLAIM_SECONDS = 10
#: What the claim reads once the callback is out, and for how many seconds (Celery's
#: marker and time): a copy of a part that comes later writes nothing.
DONE = "done"
DONE_SECONDS = 300

#: The header tasks whose chords this module joins: toolfan's ``execute``, and any named to
#: :func:`join_chords_of`.
JOINED: set[str] = {EXECUTE_TASK}

#: KEYS: results, size, claim. ARGV: the part's index, its encoded result, the results'
#: expiry in seconds (0: none), the part's task id, the claim's seconds. Returns every
#: result, in index order, to the part that completes the chord and holds its claim (or
#: held it: the same task delivered again); nothing to any other. A part that comes before
#: the size is kept (Celery's canvas writes the size as it sends the last part); one that
#: comes once the chord is done (the claim reads ``done``) is not.
JOIN = """
local owner = redis.call('GET', KEYS[3])
if owner == 'done' then
  return false
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
local count = redis.call('ZCARD', KEYS[1])
if count == 1 and tonumber(ARGV[3]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
local size = redis.call('GET', KEYS[2])
if not size or count < tonumber(size) then
  return false
end
if owner and owner ~= ARGV[4] then
  return false
end
redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[5])
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""


class JoiningRedisBackend(RedisBackend):
    """Celery's Redis result backend, joining the chords of ``execute`` tasks itself."""

    # What this uses of Celery's backend that its type stubs leave out.
    app: Any
    chord_expires: int | None
    _chord_zset: bool
    _join: LuaScript | None = None

    def on_chord_part_return(
        self, request: Any, state: str, result: Any, propagate: Any = None, **kwargs: Any
    ) -> Any:
        """Count one finished part of a chord; the last one sends the callback.

        A part already counted as its result was saved (:func:`counted`) is not counted
        again: it only sends the callback if it completed the chord.
        """
        counted: Joined | None = getattr(request, JOINED_ATTR, None)
        if counted is not None:
            keys, members = counted
        else:
            if not _joined_here(request) or not self._chord_zset:
                return super().on_chord_part_return(request, state, result, propagate, **kwargs)
            keys, args = self.join_of(request, state, result)
            members = self._script()(keys, args)
        if members:
            self._complete(request, members, keys)
        return None

    def join_of(self, request: Any, state: str, result: Any) -> tuple[list[str], list[Any]]:
        """The keys and arguments of :data:`JOIN` for this part ending in ``state``."""
        group = str(request.group)
        keys = [self._key(group, RESULTS_SUFFIX), self._key(group, SIZE_SUFFIX)]
        keys.append(self._key(group, CLAIM_SUFFIX))
        encoded = self.encode([1, request.id, state, self.encode_result(result, state)])
        expires = self.chord_expires or 0
        return keys, [request.group_index, encoded, int(expires), request.id, CLAIM_SECONDS]

    def _complete(self, request: Any, members: list[Any], keys: list[str]) -> None:
        """Send the callback with every result, then delete the chord's keys."""
        callback: Any = maybe_signature(request.chord, app=self.app)
        ids = _ids(request)
        try:
            results = [self._unpack(member) for member in members]
            callback.delay(results)
        except ChordError as exc:
            log.error("%s chord failed: %s", where(ids), exc, extra=ids)
            self.chord_error_from_stack(callback, exc)
        except Exception as exc:  # the broker refused the callback: Celery's answer, logged
            log.exception("%s sending the chord's callback failed", where(ids), extra=ids)
            self.chord_error_from_stack(callback, ChordError(f"Callback error: {exc!r}"))
        finally:
            self._clean_up(keys, ids)

    def _clean_up(self, keys: list[str], ids: dict[str, str]) -> None:
        """Delete a joined chord's results and size, and mark it done (one round trip).

        Left behind, they expire on their own.
        """
        results, size, claim = keys
        try:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.delete(results, size)
                pipe.set(claim, DONE, ex=DONE_SECONDS)
                pipe.execute()
        except redis.RedisError as exc:
            log.warning(
                "%s the chord's keys stay until they expire: %s", where(ids), exc, extra=ids
            )

    def _unpack(self, member: Any) -> Any:
        """One part's result; a part that failed fails the chord, as in Celery's join.

        Raises:
            ChordError: the part ended in a state that propagates (a failure).
        """
        _, task_id, state, value = self.decode(member)
        if state in states.EXCEPTION_STATES:
            value = self.exception_to_python(value)
        if state in states.PROPAGATE_STATES:
            raise ChordError(f"Dependency {task_id} raised {value!r}")
        return value

    def _key(self, group: str, suffix: str) -> str:
        key: str = self.get_key_for_group(group, suffix)
        return key

    def _script(self) -> LuaScript:
        if self._join is None:
            self._join = LuaScript(self.client, JOIN, script_connections(self.client))
        return self._join


#: A part counted as its result was saved: the chord's keys, and every result if that
#: part completed the chord (else None).
Joined = tuple[list[str], list[Any] | None]
#: Where that is kept, on the task's request, for :meth:`JoiningRedisBackend.on_chord_part_return`.
JOINED_ATTR = "toolfan_joined"


def joinable(backend: Any, request: Any, client: redis.Redis) -> bool:
    """Whether this part's result can be saved on ``client`` and counted in the same script.

    Only for a part of a chord this module joins, whose results live on the same Redis
    server and database as ``client`` (the ledger's: a script runs on one server). A
    result backend or ledger elsewhere (another URL, a cluster, sentinels) keeps the two
    round trips.
    """
    return (
        isinstance(backend, JoiningRedisBackend)
        and backend._chord_zset
        and _joined_here(request)
        and bool(request.chord)
        and same_server(client, backend.client)
    )


def same_server(a: redis.Redis, b: redis.Redis) -> bool:
    """Whether two clients talk to the same Redis database, by their pools' settings."""
    pa, pb = a.connection_pool, b.connection_pool
    if pa is pb:
        return True
    if type(a) is not redis.Redis or type(b) is not redis.Redis:
        return False
    if pa.connection_class is not pb.connection_class:
        return False
    ka, kb = pa.connection_kwargs, pb.connection_kwargs
    return all(ka.get(k) == kb.get(k) for k in ("host", "port", "path", "db", "username"))


def counted(request: Any, keys: list[str], members: list[Any] | None) -> None:
    """Record on the request that its part was counted as its result was saved."""
    setattr(request, JOINED_ATTR, (keys, members or None))


def join_chords_of(task_name: str) -> None:
    """Join the chords whose header tasks are named ``task_name`` here, as ``execute``'s.

    For chords sent as toolfan sends its own: every header task with its index, the size
    where Celery's Redis backend keeps it, results in Celery's sorted set (the default).
    """
    JOINED.add(task_name)


def _joined_here(request: Any) -> bool:
    """Whether this part is of a chord with an index whose header task is joined here."""
    return (
        getattr(request, "task", None) in JOINED
        and bool(request.group)
        and bool(request.id)
        and request.group_index is not None
    )


def _ids(request: Any) -> dict[str, str]:
    """The chord's group and, from the part's message, the batch it answers."""
    call = (request.kwargs or {}).get("call") if isinstance(request.kwargs, dict) else None
    batch = call.get("batch_id") if isinstance(call, dict) else None
    ids = {"chord": str(request.group)}
    if isinstance(batch, str):
        ids["batch_id"] = batch
    return ids


def backend_class(cls: type[Any]) -> type[Any]:
    """The result backend class toolfan's app uses for ``cls``: Redis's joins ``execute``."""
    return JoiningRedisBackend if cls is RedisBackend else cls
