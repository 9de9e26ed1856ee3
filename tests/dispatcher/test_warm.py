"""Warming the push path at start: what each process warms, and that a failure is harmless."""

from __future__ import annotations

import logging

import pytest

from dispatcher import warm
from dispatcher.sources.agents import get_client
from dispatcher.webhook.verify import _verifier


def test_each_worker_warms_what_its_queues_need():
    poll = warm.steps_for(["toolfan.poll", "fn.add"], ["agents"])
    assert poll == [warm.warm_clients, warm.warm_poller, warm.warm_broker]
    assert warm.steps_for(["toolfan.submit"], ["agents"]) == [warm.warm_clients, warm.warm_broker]
    runs_only = warm.steps_for(["toolfan.poll"], ["assistants"])
    assert runs_only == [warm.warm_clients, warm.warm_broker]  # the push task reads sessions
    assert warm.steps_for(["fn.add", "fn.slow"], ["agents"]) == []  # talks to no API


def test_a_failing_step_is_logged_and_never_raised(caplog):
    def down() -> None:
        raise ConnectionError("Redis is down")

    caplog.set_level(logging.INFO, "toolfan.warm")
    assert warm.warmed("the intake", [down]) is False
    assert "the intake not warmed (ConnectionError: Redis is down)" in caplog.text
    assert warm.warm_intake(down) is False


def test_warming_builds_the_verifier_clients_and_connections(redis_client, caplog, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")  # read when the client is built
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never asked: no request
    _verifier.cache_clear()
    get_client.cache_clear()
    caplog.set_level(logging.INFO, "toolfan.warm")
    assert warm.warm_intake(redis_client.ping) is True
    assert _verifier.cache_info().currsize == 1
    assert warm.warmed("this worker", warm.steps_for(["toolfan.poll"], ["agents"])) is True
    assert get_client.cache_info().currsize == 1
    assert "this worker warmed in" in caplog.text
    get_client.cache_clear()  # the next test builds its own, from its own environment


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_only_a_pool_that_runs_tasks_in_the_main_process_warms_there(pool):
    from celery.concurrency import get_implementation

    class Consumer:
        pass

    consumer = Consumer()
    consumer.pool = object.__new__(get_implementation(pool))  # type: ignore[attr-defined]
    assert warm._runs_tasks_here(consumer) is (pool != "prefork")
