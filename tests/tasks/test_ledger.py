import os
import time
import uuid

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from handlers.result import CallResult, Outcome
from tasks import keys
from tasks.ledger import CallRef, Ledger, LedgerError


@pytest.fixture
def ledger(redis_client) -> Ledger:
    return Ledger(redis_client, ttl=3600, source="agents")


def ref() -> CallRef:
    return CallRef(f"sess_{uuid.uuid4().hex[:8]}", "turn_1", f"call_{uuid.uuid4().hex[:8]}")


def test_begin_counts_attempts_until_a_result_is_saved(ledger, redis_client):
    r = ref()
    first = ledger.begin(r, "add")
    assert (first.saved, first.attempts) == (None, 1)
    assert ledger.begin(r, "add").attempts == 2
    saved = ledger.finish(r, CallResult.ok("3"))
    assert saved == CallResult.ok("3")
    again = ledger.begin(r, "add")
    assert again.saved == CallResult.ok("3") and again.attempts == 2
    record = ledger.record(r)
    assert record.state == "done" and record.name == "add" and record.attempts == 2
    assert record.first_started_at <= record.started_at <= record.finished_at
    assert 0 < redis_client.ttl(ledger.key(r)) <= 3600


def test_first_saved_result_wins(ledger):
    r = ref()
    ledger.begin(r, "add")
    ledger.finish(r, CallResult.ok("first"))
    assert ledger.finish(r, CallResult.fail(Outcome.TIMEOUT, "late")) == CallResult.ok("first")
    assert ledger.record(r).result == CallResult.ok("first")


def test_keys_share_the_batch_hash_tag():
    assert keys.call("agents", "s1", "t", "c") == "toolfan:v2:agents:call:{s1}:t:c"
    assert keys.claim("agents", "s1") == "toolfan:v2:agents:claim:{s1}"


def test_unknown_record_is_none(ledger):
    assert ledger.record(ref()) is None


def test_claims_are_leases_with_owner_tokens(ledger, redis_client):
    session = ref().batch_id
    assert ledger.claim(session, "owner-a", 5000)
    assert not ledger.claim(session, "owner-b", 5000)
    assert ledger.claim_owner(session) == "owner-a"
    assert not ledger.release(session, "owner-b")
    assert ledger.claim_owner(session) == "owner-a"
    assert ledger.reclaim(session, "owner-a", 60_000)
    assert redis_client.pttl(keys.claim("agents", session)) > 5000
    assert not ledger.reclaim(session, "owner-b", 60_000)
    assert ledger.release(session, "owner-a")
    assert ledger.claim_owner(session) is None
    assert ledger.claim(session, "owner-b", 5000)


def test_claim_expires(ledger):
    session = ref().batch_id
    assert ledger.claim(session, "a", 50)
    time.sleep(0.15)
    assert ledger.claim(session, "b", 5000)
    assert not ledger.release(session, "a")


def test_unreachable_redis_is_a_ledger_error():
    dead = Ledger(
        redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)),
        ttl=60,
        source="agents",
    )
    with pytest.raises(LedgerError, match="ledger unavailable"):
        dead.begin(ref(), "add")
    assert os.environ["TOOLFAN_REDIS_URL"].endswith("/15")


def test_claim_dispatch_takes_a_free_claim_and_records_the_dispatch(ledger, redis_client):
    from tasks.ledger import Dispatch

    session = ref().batch_id
    first = Dispatch("tok-a", 100.0, 5000, expires_at=200.0, first_seen=90.0)
    assert ledger.claim_dispatch(session, first)
    assert ledger.claim_owner(session) == "tok-a"
    assert ledger.dispatch(session) == first
    assert 0 < redis_client.pttl(keys.claim("agents", session)) <= 5000
    assert 0 < redis_client.ttl(keys.dispatch("agents", session)) <= 3600
    assert not ledger.claim_dispatch(session, Dispatch("tok-b", 101.0, 5000))
    assert ledger.dispatch(session) == first


def test_a_new_dispatch_replaces_every_field_of_the_previous_one(ledger):
    """A claim or a takeover writes a dispatch over the last one: no old field may survive."""
    from tasks.ledger import Dispatch

    session = ref().batch_id
    assert ledger.claim_dispatch(session, Dispatch("tok-a", 100.0, 5000, 200.0, 90.0))
    assert ledger.release(session, "tok-a")
    second = Dispatch("tok-b", 101.0, 7000)
    assert ledger.claim_dispatch(session, second)
    assert ledger.dispatch(session) == second
    ledger.record_dispatch(session, Dispatch("tok-c", 102.0, 9000, 300.0, 95.0))
    third = Dispatch("tok-d", 103.0, 9000)
    ledger.record_dispatch(session, third)
    assert ledger.dispatch(session) == third


@pytest.fixture
def counted():
    """A ledger on a Redis of its own, so INFO commandstats counts only the test's commands."""
    from dispatcher.devstack import private_redis

    with private_redis() as base:
        client = redis.Redis.from_url(f"{base}/0", decode_responses=True)
        try:
            yield client, Ledger(client, ttl=3600, source="agents")
        finally:
            client.close()


def test_a_claim_costs_three_commands_inside_its_script(counted):
    """Each dispatched batch is claimed once: SET NX, the dispatch's HSET and its EXPIRE.

    Before, the script also deleted the previous dispatch first.
    """
    from tasks.ledger import Dispatch

    client, ledger = counted
    assert ledger.claim_dispatch("sess_warm", Dispatch("tok-w", 100.0, 5000))  # loads it
    client.config_resetstat()
    assert ledger.claim_dispatch("sess_1", Dispatch("tok-a", 100.0, 5000, None, 90.0))
    assert _commands(client, "evalsha") == {"set": 1, "hset": 1, "expire": 1}


def test_mark_submitted_records_every_call_and_frees_only_its_own_claim(ledger, redis_client):
    r1 = ref()
    r2 = CallRef(r1.batch_id, "turn_2", "call_x")
    for r in (r1, r2):
        ledger.begin(r, "add")
        ledger.finish(r, CallResult.ok("1"))
    ledger.claim(r1.batch_id, "other", 5000)
    ledger.mark_submitted(r1.batch_id, "mine", [r1, r2], "key-1")
    assert ledger.claim_owner(r1.batch_id) == "other"
    assert [ledger.record(r).state for r in (r1, r2)] == ["submitted", "submitted"]
    assert ledger.record(r2).submission_key == "key-1"
    ledger.release(r1.batch_id, "other")
    ledger.claim(r1.batch_id, "mine", 5000)
    ledger.mark_submitted(r1.batch_id, "mine", [r1], "key-1")
    assert ledger.claim_owner(r1.batch_id) is None


def test_finish_without_begin_still_gets_a_ttl(ledger, redis_client):
    r = ref()
    ledger.finish(r, CallResult.fail(Outcome.TIMEOUT, "late"))
    assert 0 < redis_client.ttl(ledger.key(r)) <= 3600


def test_a_batch_that_ended_stops_calls_not_yet_begun_but_keeps_saved_results(redis_client):
    runs = Ledger(redis_client, ttl=3600, source="assistants", batches_end=True)
    done, waiting = CallRef("b", "p", "c1"), CallRef("b", "p", "c2")
    runs.begin(done, "add")
    runs.finish(done, CallResult.ok("1"))
    runs.end_batch("b", "the run is cancelled")
    assert runs.begin(waiting, "add").ended == "the run is cancelled"
    assert runs.record(waiting) is None  # not even recorded as started
    assert runs.begin(done, "add").saved == CallResult.ok("1")
    unaware = Ledger(
        redis_client, ttl=3600, source="assistants"
    )  # a source whose batches never end
    assert unaware.begin(waiting, "add").ended is None


def test_begin_costs_three_commands_inside_its_script(counted):
    """A call's begin is on every call's path: one HMGET, one HSET and one EXPIRE.

    Before, the script read the record with two HGETs and counted the attempt with an
    HINCRBY.
    """
    client, ledger = counted
    r = ref()
    ledger.begin(r, "add")  # loads the script
    client.config_resetstat()
    assert ledger.begin(r, "add").attempts == 2
    assert _commands(client, "evalsha") == {"hmget": 1, "hset": 1, "expire": 1}


def _commands(client: redis.Redis, *leave_out: str) -> dict[str, int]:
    """Commands counted since the last reset, the counting's own (and ``leave_out``) left out."""
    skip = {"info", "config|resetstat", *leave_out}
    return {
        name.removeprefix("cmdstat_"): int(stat["calls"])
        for name, stat in client.info("commandstats").items()
        if name.removeprefix("cmdstat_") not in skip
    }


def test_the_claims_of_a_page_cost_one_command(counted):
    """A poller reads the claims of the sessions it dispatched on every pass they are listed.

    Before, this was one GET per claim (120 here).
    """
    client, ledger = counted
    batches = [f"sess_{i}" for i in range(120)]
    for i in range(0, 120, 3):
        assert ledger.claim(batches[i], f"token-{i}", 60_000)
    client.config_resetstat()
    owners = ledger.claim_owners(batches)
    assert _commands(client) == {"mget": 1}
    assert owners == [f"token-{i}" if i % 3 == 0 else None for i in range(120)]


def test_claims_beyond_one_mget_keep_their_order(ledger):
    from tasks.ledger import MGET_KEYS

    count = 2 * MGET_KEYS + 7
    batches = [f"sess_{uuid.uuid4().hex[:8]}:{i}" for i in range(count)]
    claimed = {0, MGET_KEYS - 1, MGET_KEYS, 2 * MGET_KEYS + 6}
    for i in claimed:
        assert ledger.claim(batches[i], f"token-{i}", 60_000)
    owners = ledger.claim_owners(batches)
    assert owners == [f"token-{i}" if i in claimed else None for i in range(count)]
    assert ledger.claim_owners([]) == []


def test_scripts_run_again_once_redis_has_lost_them(ledger, redis_client):
    # A Redis that restarted or failed over has none of the scripts the ledger ran before.
    r = ref()
    assert ledger.begin(r, "add").attempts == 1
    redis_client.script_flush()
    assert ledger.finish(r, CallResult.ok("3")) == CallResult.ok("3")
    redis_client.script_flush()
    again = ledger.begin(r, "add")
    assert again.saved == CallResult.ok("3") and again.attempts == 1
