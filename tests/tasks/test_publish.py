"""send_chord: the messages of Celery's own chords, in one broker round trip per batch.

Each test uses a Celery app of its own on a private redis-server (broker database 0,
results 1), with toolfan's Celery configuration: no worker consumes its queues, so the
messages stay where the test reads them, and the server's counters are the test's alone.
"""

from __future__ import annotations

import base64
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery, chord
from celery.canvas import Signature
from kombu import Connection

from tasks.dispatch import _not_subscribing
from tasks.publish import send_chord
from tests.services import wait_for
from tests.tasks.apps import private_app

QUEUE = "fn.publish_test"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture
def app() -> Iterator[Celery]:
    with private_app("publish-test") as app:
        yield app


def header(app: Celery, calls: int, queue: str = QUEUE) -> list[Signature[Any]]:
    return [
        Signature(
            "toolfan.execute",
            kwargs={"call": {"call_id": f"call_{i}", "arguments": {"n": i}}},
            options={
                "queue": queue,
                "time_limit": 40.0,
                "ignore_result": True,
                "argsrepr": "()",
                "kwargsrepr": f"{{'call': ('call_{i}', <arguments hidden>)}}",
            },
            app=app,
        )
        for i in range(calls)
    ]


def body(app: Celery) -> Signature[Any]:
    return Signature(
        "toolfan.submit",
        kwargs={"batch": {"batch_id": "sess_1"}, "saved": []},
        options={"queue": "toolfan.submit", "ignore_result": True, "kwargsrepr": "{...}"},
        app=app,
    )


def queued(app: Celery) -> list[dict[str, Any]]:
    """The messages on the test queue, oldest first, decoded, with every uuid blanked."""
    client = redis.Redis.from_url(app.conf.broker_url)
    raw = [json.loads(m) for m in reversed(client.lrange(QUEUE, 0, -1))]
    client.delete(QUEUE)
    client.close()
    for message in raw:
        message["body"] = json.loads(base64.b64decode(message["body"]))
    return json.loads(UUID.sub("<uuid>", json.dumps(raw)))


def test_a_chord_is_sent_as_celerys_canvas_sends_it(app):
    with _not_subscribing(app.backend):
        chord(header(app, 3), app=app)(body(app))
    by_celery = queued(app)
    send_chord(app, header(app, 3), body(app))
    ours = queued(app)
    assert len(ours) == 3
    assert ours == by_celery
    embedded = ours[2]["body"][2]["chord"]
    assert embedded["task"] == "toolfan.submit" and ours[2]["headers"]["group_index"] == 2


def test_the_chord_size_is_where_celery_looks_for_it(app):
    group_id = send_chord(app, header(app, 4), body(app))
    backend = redis.Redis.from_url(app.conf.result_backend)
    key = app.backend.get_key_for_group(group_id, ".s")
    assert backend.get(key) == b"4"
    assert 0 < backend.ttl(key) <= app.backend.chord_expires
    client = redis.Redis.from_url(app.conf.broker_url)
    groups = {json.loads(m)["headers"]["group"] for m in client.lrange(QUEUE, 0, -1)}
    assert groups == {group_id}


def round_trips(app: Celery, send: Callable[[], object]) -> int:
    """Requests the server read from its clients while ``send`` ran (one per round trip).

    Three messages fit in one write of the client (redis-py sends a pipeline in pieces of
    about 6 KB) and one read of the server, so a pipeline of them is one read; the counting
    client's own INFO is one more, taken off.
    """
    counter = redis.Redis.from_url(app.conf.broker_url)
    try:
        before = int(counter.info("stats")["total_reads_processed"])
        send()
        return int(counter.info("stats")["total_reads_processed"]) - before - 1
    finally:
        counter.close()


def test_a_batch_of_calls_costs_one_round_trip_to_the_broker_and_one_to_the_backend(app):
    send_chord(app, header(app, 2), body(app))  # connections open, queue declared
    with _not_subscribing(app.backend):
        chord(header(app, 2), app=app)(body(app))
    queued(app)
    ours = round_trips(app, lambda: send_chord(app, header(app, 3), body(app)))
    assert len(queued(app)) == 3
    with _not_subscribing(app.backend):
        canvas = round_trips(app, lambda: chord(header(app, 3), app=app)(body(app)))
    assert len(queued(app)) == 3
    assert ours == 2  # the chord's size (one SET), then the three messages in one pipeline
    assert canvas == 5  # the size in two (DEL, SET), then one round trip per message


def test_an_empty_chord_or_a_nameless_task_is_refused(app):
    with pytest.raises(ValueError, match="at least one"):
        send_chord(app, [], body(app))
    with pytest.raises(ValueError, match="task name"):
        send_chord(app, [*header(app, 1), Signature(None, app=app)], body(app))
    assert queued(app) == []  # nothing was sent


def test_a_frozen_header_task_keeps_its_id_as_with_the_canvas(app):
    frozen = header(app, 2)
    frozen[1].freeze("frozen-task-id")
    send_chord(app, frozen, body(app))
    client = redis.Redis.from_url(app.conf.broker_url)
    ids = [json.loads(m)["headers"]["id"] for m in reversed(client.lrange(QUEUE, 0, -1))]
    assert ids[1] == "frozen-task-id" and UUID.fullmatch(ids[0])


def test_a_batch_checks_its_queue_is_declared_once_not_once_per_message(app, monkeypatch):
    """Celery's per-message check costs a bind and a retry wrapper each time."""
    from kombu import Producer

    checks: list[str] = []
    real = Producer.maybe_declare

    def counted(self: Producer, entity: Any, *args: Any, **kwargs: Any) -> Any:
        checks.append(getattr(entity, "name", ""))
        return real(self, entity, *args, **kwargs)

    monkeypatch.setattr(Producer, "maybe_declare", counted)
    send_chord(app, header(app, 3), body(app))
    assert len(queued(app)) == 3
    assert checks == [QUEUE]
    send_chord(app, header(app, 4), body(app))
    assert len(queued(app)) == 4
    assert checks == [QUEUE, QUEUE]


def test_on_rabbitmq_a_batch_declares_its_queue_before_its_first_message(app):
    """RabbitMQ drops a message sent to a queue nobody declared: the batch must declare it.

    A queue of this test's own, on the suite's RabbitMQ (``TOOLFAN_TEST_AMQP_URL``; under CI
    a missing RabbitMQ fails the test), deleted at the end.
    """
    from tests.conftest import amqp_problem, amqp_url

    url = amqp_url()
    problem = amqp_problem(url)
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(f"{problem} (set CI to fail instead)")
    queue = f"fn.publish_test_{uuid.uuid4().hex[:12]}"
    rabbit = Celery("publish-test-amqp", set_as_current=False)
    rabbit.conf.update(app.conf)
    rabbit.conf.update(broker_url=url)
    try:
        send_chord(rabbit, header(rabbit, 3, queue), body(rabbit))
        # Sent without confirms, the messages may still be on their way when send_chord
        # returns (CI once counted 1 of 3 at once); sent to an undeclared queue, they never
        # arrive, and counting the queue raises.
        count = wait_for(lambda: _routed(url, queue, 3), 10, "3 messages routed")
    finally:
        rabbit.close()
        with Connection(url) as connection:  # whatever the test got to, the queue goes
            connection.channel().queue_delete(queue)
    assert count == 3


def _routed(url: str, queue: str, expected: int) -> int:
    """The queue's message count once it holds ``expected`` messages; 0 before."""
    with Connection(url) as connection:
        _, count, _ = connection.channel().queue_declare(queue, passive=True)
    return int(count) if count >= expected else 0
