"""Push end to end: the emulator delivers signed events to a real ``toolfan webhook``.

With the poller at a 60 s interval as the safety net, sessions are answered within
seconds of their push, exactly once, whatever the deliveries do (duplicates, reordering);
the ones whose delivery is dropped are answered by the next poll pass.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dispatcher.devstack import Service
from emulator import function_call
from tests.conftest import worker_env
from tests.e2e.test_webhook_intake import SECRET, intake  # noqa: F401  # the fixture
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")

SESSIONS = 100


def answered_once(api, redis_client, sid: str, key: str) -> bool:
    return len(api.batches(sid)) == 1 and redis_client.get(f"test:runs:{key}") == "1"


def test_pushed_sessions_are_answered_in_seconds_once_and_dropped_ones_by_the_poll(
    intake,  # noqa: F811
    api,
    redis_client,
):
    api.webhooks.register(f"{intake}/webhooks/openai", secret=SECRET)
    api.webhooks.set_faults(duplicate=0.3, reorder=300, drop=0.05, seed=7)
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / "safety-poller.log"
    poller = Service(["poll", "--interval", "60"], log, worker_env())
    try:
        poller.wait_for_output("poll:", 30)  # its first pass is over: the next is 60 s away
        started = time.monotonic()
        sids = {}
        for i in range(SESSIONS):
            session = api.create_session([function_call("count", {"key": f"push-{i}"})])
            sids[str(session["id"])] = f"push-{i}"
        dropped = {
            sid for sid in sids if any(d.attempt == 0 for d in api.webhooks.deliveries(session=sid))
        }
        pushed = set(sids) - dropped
        assert 0 < len(dropped) < 20, "the seed drops a few deliveries"
        wait_for(lambda: all(api.batches(s) for s in pushed), 30, "every pushed session answered")
        pushed_in = time.monotonic() - started
        assert pushed_in < 15, f"pushed sessions took {pushed_in:.1f} s"
        assert not any(api.batches(s) for s in dropped), "no poll pass yet: only pushes ran"
        duplicates = sum(1 for d in api.webhooks.deliveries() if d.duplicate)
        assert duplicates > 10
        wait_for(lambda: all(api.batches(s) for s in dropped), 90, "the safety-net poll")
    finally:
        poller.stop()
    time.sleep(1.0)  # late duplicates had their chance to dispatch twice
    assert all(answered_once(api, redis_client, sid, key) for sid, key in sids.items())


def test_a_delivery_during_a_redis_outage_is_refused_503_and_the_retry_is_taken(
    api, redis_client, tmp_path
):
    """The intake's Redis is down when the event arrives: 503, and nothing is dispatched.

    This intake keeps its deliveries' ids on a private Redis, stopped for the first
    attempt and started again before the emulator's retry (2 s later), which is taken.
    """
    from dispatcher.devstack import free_port
    from tests.services import AofRedis

    private = AofRedis(tmp_path / "redis")
    port = free_port()
    env = worker_env(TOOLFAN_REDIS_URL=f"{private.url}/0", OPENAI_WEBHOOK_SECRET=SECRET)
    service = Service(["webhook", "--port", str(port)], tmp_path / "intake.log", env)
    try:
        service.wait_for_output("listening", 30)
        endpoint = api.webhooks.register(f"http://127.0.0.1:{port}/webhooks/openai", secret=SECRET)
        api.webhooks.set_faults(retry_base=2.0)
        private.stop()
        session = api.create_session([function_call("count", {"key": "outage"})])
        sid = str(session["id"])
        wait_for(
            lambda: [d for d in api.webhooks.deliveries(session=sid) if d.status or d.error],
            10,
            "the first attempt's answer",
        )
        assert api.webhooks.deliveries(session=sid)[0].status == 503
        assert api.batches(sid) == [] and redis_client.get("test:runs:outage") is None
        private.restart_stopped()
        wait_for(lambda: api.batches(sid), 60, "the retried delivery's dispatch")
    finally:
        service.stop()
        private.stop()
    attempts = api.webhooks.deliveries(session=sid, endpoint=endpoint["id"])
    assert [a.status for a in attempts][-1] == 202, attempts
    assert answered_once(api, redis_client, sid, "outage")


def test_a_delivery_during_a_broker_outage_is_refused_503_and_the_retry_is_queued(
    api, redis_client, tmp_path
):
    """The broker is down when the event arrives: 503, the id is not kept, the retry is taken.

    This intake publishes to a private broker, stopped for the first attempt and started
    again before the emulator's retry; the retry's push task then waits on that broker's
    ``toolfan.poll`` queue (no worker consumes it: the session's worker has its own broker).
    """
    import redis

    from dispatcher.devstack import free_port
    from tests.services import AofRedis

    broker = AofRedis(tmp_path / "broker")
    port = free_port()
    env = worker_env(TOOLFAN_BROKER_URL=f"{broker.url}/0", OPENAI_WEBHOOK_SECRET=SECRET)
    service = Service(["webhook", "--port", str(port)], tmp_path / "intake.log", env)
    try:
        service.wait_for_output("listening", 30)
        endpoint = api.webhooks.register(f"http://127.0.0.1:{port}/webhooks/openai", secret=SECRET)
        api.webhooks.set_faults(retry_base=2.0)
        broker.stop()
        sid = str(api.create_session([function_call("count", {"key": "no-broker"})])["id"])
        wait_for(
            lambda: [d for d in api.webhooks.deliveries(session=sid) if d.status or d.error],
            15,
            "the first attempt's answer",
        )
        assert api.webhooks.deliveries(session=sid)[0].status == 503
        assert not redis_client.keys("*webhook*"), "a refused delivery's id is not kept"
        broker.restart_stopped()
        statuses = lambda: [d.status for d in api.webhooks.deliveries(session=sid)]  # noqa: E731
        wait_for(lambda: 202 in statuses(), 60, "the retried delivery to be taken")
        queued = redis.Redis.from_url(f"{broker.url}/0")
        assert queued.llen("toolfan.poll") == 1, "the retry's push task waits on the broker"
        queued.close()
    finally:
        service.stop()
        broker.stop()
    attempts = api.webhooks.deliveries(session=sid, endpoint=endpoint["id"])
    assert [a.status for a in attempts] == [503, 202], attempts
    assert redis_client.get("test:runs:no-broker") is None
