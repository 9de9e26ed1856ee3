"""The ledger's scripts on kept connections: no pool on the way, and nothing it guarded lost.

Each test names what the pool's checkout, or the client's wrapper, did for a command that
the kept connections must still do: connect again when the server closed the socket,
never read a reply left unread as the next one, give a forked child sockets of its own,
and serve many threads at once.
"""

from __future__ import annotations

import gc
import os
import threading
import uuid
from typing import Any

import pytest
import redis

from handlers.result import CallResult
from tasks.ledger import CallRef, Ledger, LedgerError
from tasks.lua import ScriptConnections, ready_as_before, script_connections


def _ref() -> CallRef:
    return CallRef(f"sess_{uuid.uuid4().hex[:8]}", "turn_1", f"call_{uuid.uuid4().hex[:8]}")


def _kept(ledger: Ledger) -> ScriptConnections:
    scripts = ledger._scripts
    assert scripts is not None
    return scripts


def _client_id(conn: Any) -> int:
    conn.send_command("CLIENT", "ID")
    return int(conn.read_response())


def test_a_warm_ledger_takes_no_connection_from_the_pool(redis_client, monkeypatch) -> None:
    ledger, r, other = Ledger(redis_client, ttl=60, source="agents"), _ref(), _ref()
    ledger.begin(r, "add")
    ledger.finish(other, CallResult.ok("0"))  # both scripts loaded: no SCRIPT LOAD below
    taken: list[object] = []
    real = redis_client.connection_pool.get_connection
    monkeypatch.setattr(
        redis_client.connection_pool, "get_connection", lambda: taken.append(1) or real()
    )
    for attempt in range(2, 52):
        assert ledger.begin(r, "add").attempts == attempt
    assert ledger.finish(r, CallResult.ok("3")) == CallResult.ok("3")
    assert ledger.begin(r, "add").saved == CallResult.ok("3")
    assert taken == []


#: The check before a kept connection is used: the pool's ``ensure_connection`` (redis-py 8),
#: or what ``get_connection`` did inline before it (5.3 to 7), which ``ready_as_before`` does.
CHECKS = pytest.mark.parametrize("before_8", [False, True], ids=["redis-py 8", "before 8"])


def _checked_ledger(client: redis.Redis, before_8: bool) -> Ledger:
    ledger = Ledger(client, ttl=60, source="agents")
    if before_8:
        _kept(ledger)._ready = ready_as_before
    return ledger


@CHECKS
def test_a_connection_the_server_closed_is_connected_again(redis_client, before_8) -> None:
    ledger, r = _checked_ledger(redis_client, before_8), _ref()
    assert ledger.begin(r, "add").attempts == 1
    conn = _kept(ledger)._idle[-1]
    killer = redis.Redis.from_url(os.environ["TOOLFAN_REDIS_URL"])
    try:
        assert killer.client_kill_filter(_id=_client_id(conn)) == 1
    finally:
        killer.close()
    assert ledger.begin(r, "add").attempts == 2  # the client has no retries: no error either


@CHECKS
def test_a_reply_that_arrived_unread_is_never_read_as_the_next_one(redis_client, before_8) -> None:
    ledger, r = _checked_ledger(redis_client, before_8), _ref()
    ledger.begin(r, "add")
    conn = _kept(ledger)._idle[-1]
    conn.send_command("PING")  # left unread, as if interrupted between a send and its read
    while not conn.can_read(timeout=0.01):
        pass
    begun = ledger.begin(r, "add")
    assert (begun.saved, begun.attempts) == (None, 2)
    assert ledger.finish(r, CallResult.ok("3")) == CallResult.ok("3")


def test_a_script_interrupted_before_its_read_closes_its_connection(
    redis_client, monkeypatch
) -> None:
    ledger, r = Ledger(redis_client, ttl=60, source="agents"), _ref()
    ledger.begin(r, "add")
    conn = _kept(ledger)._idle[-1]

    def interrupted() -> None:
        monkeypatch.undo()
        raise KeyboardInterrupt  # before anything is read, unlike redis-py's own errors

    monkeypatch.setattr(conn, "read_response", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ledger.begin(r, "add")  # it ran: the second attempt
    assert conn._sock is None  # closed at once, not left for a check before the next use
    assert ledger.begin(r, "add").attempts == 3


def test_a_forked_child_runs_its_scripts_on_sockets_of_its_own(redis_client) -> None:
    ledger, r = Ledger(redis_client, ttl=60, source="agents"), _ref()
    ledger.begin(r, "add")
    parent_id = _client_id(_kept(ledger)._idle[-1])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one script, then the id of the connection it ran on
        try:
            attempts = ledger.begin(r, "add").attempts
            os.write(write, f"{attempts} {_client_id(_kept(ledger)._idle[-1])}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        attempts, child_id = answer.read().split()
    os.waitpid(pid, 0)
    assert (int(attempts), int(child_id) != parent_id) == (2, True)
    assert ledger.begin(r, "add").attempts == 3  # the parent's connection is intact
    assert _client_id(_kept(ledger)._idle[-1]) == parent_id


def test_threads_at_once_each_get_their_own_replies(redis_client) -> None:
    ledger, errors = Ledger(redis_client, ttl=60, source="agents"), []

    def work(n: int) -> None:
        try:
            for i in range(60):
                r = CallRef(f"sess_{n}", "turn_1", f"call_{i}")
                assert ledger.begin(r, "add").attempts == 1
                mine = CallResult.ok(f"{n}-{i}")
                assert ledger.finish(r, mine) == mine
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert 1 <= len(_kept(ledger)._idle) <= 16


def test_a_scoped_ledger_shares_the_kept_connections(redis_client) -> None:
    ledger = Ledger(redis_client, ttl=60, source="agents")
    assert ledger.scoped("assistants", batches_end=True)._scripts is ledger._scripts


def test_a_dropped_ledger_gives_its_connections_back_to_the_pool(redis_client) -> None:
    ledger = Ledger(redis_client, ttl=60, source="agents")
    ledger.begin(_ref(), "add")
    assert len(redis_client.connection_pool._in_use_connections) == 1
    del ledger
    gc.collect()
    assert len(redis_client.connection_pool._in_use_connections) == 0


def test_a_client_on_a_connection_of_its_own_keeps_the_clients_path() -> None:
    single = redis.Redis.from_url(
        os.environ["TOOLFAN_REDIS_URL"], decode_responses=True, single_connection_client=True
    )
    try:
        assert script_connections(single) is None
        ledger, r = Ledger(single, ttl=60, source="agents"), _ref()
        assert ledger._scripts is None
        assert ledger.begin(r, "add").attempts == 1
    finally:
        single.close()


def test_an_unreachable_redis_is_still_a_ledger_error_and_the_next_try_connects() -> None:
    refused = redis.Redis.from_url("redis://127.0.0.1:1/0")  # the ledger's client, as it is made
    dead = Ledger(refused, ttl=60, source="agents")
    for _ in range(2):
        with pytest.raises(LedgerError, match="ledger unavailable"):
            dead.begin(_ref(), "add")
