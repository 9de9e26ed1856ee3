"""Warm the push path at start, so the first deliveries after a deploy are not the slow ones.

A fresh intake spent about 0.1 s of its first delivery importing the SDK's webhook
verifier and opening its broker connection; a fresh worker on ``toolfan.poll`` spent about
0.1 s of its first push building its API client and poller; every fresh process serving
``toolfan.submit`` spent ~50 ms of its first submission building its API client. Under a
steady stream of pushes the deliveries behind the first ones queued on them: in the
bench, sessions pushed in the first two seconds after a start waited up to 1 s.

Warming does that work before the first delivery: imports, clients, and one connection
each to the ledger's Redis and to the broker. It sends nothing and asks the API nothing.
A warm-up that fails (Redis or the broker down at start) is logged and left: the first
delivery then pays as before, or is answered 503 and retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from celery.signals import worker_process_init, worker_ready

from tasks.app import app
from tasks.queues import ControlQueue

log = logging.getLogger("toolfan.warm")


def warm_broker() -> None:
    """Open a pooled producer connection to the broker (the first publish's setup)."""
    with app.producer_or_acquire() as producer:
        producer.connection.ensure_connection(max_retries=1, timeout=2)


def warm_clients() -> None:
    """Build the API client of every polled source ``TOOLFAN_SOURCES`` names.

    Making one builds its TLS context (~50 ms): a push's retrieve and a batch's
    submission would each pay it in every fresh process otherwise.
    """
    from dispatcher.pollers import POLLED, source_names
    from tasks import sources

    for name in source_names():
        if name in POLLED:
            _ = getattr(sources.get(name), "client", None)


def warm_poller() -> None:
    """Build this process's Agents poller (the push task's) and connect its ledger."""
    from dispatcher.poll import process_poller

    process_poller().ledger.client.ping()


def steps_for(consumed: Iterable[str], source_names: Iterable[str]) -> list[Callable[[], Any]]:
    """The warm-up of a worker on the queues ``consumed``, with these sources configured.

    Pushes and polls run on ``toolfan.poll``; submissions on ``toolfan.submit``. A worker
    on neither (the tool queues alone) talks to no API and warms nothing.
    """
    queues, names = set(consumed), set(source_names)
    steps: list[Callable[[], Any]] = []
    if queues & {ControlQueue.POLL.value, ControlQueue.SUBMIT.value}:
        steps.append(warm_clients)
    if ControlQueue.POLL.value in queues and "agents" in names:
        steps.append(warm_poller)
    return [*steps, warm_broker] if steps else []


def warm_intake(ping: Callable[[], Any]) -> bool:
    """Warm ``toolfan webhook``: the verifier, the ledger's Redis (``ping``), the broker."""
    from dispatcher.webhook.verify import warm_verifier

    return warmed("the intake", (warm_verifier, ping, warm_broker))


def warmed(what: str, steps: Iterable[Callable[[], Any]]) -> bool:
    """Run the warm-up ``steps``; log how long they took, or why they stopped."""
    started = time.perf_counter()
    try:
        for step in steps:
            step()
    except Exception as exc:  # never stop a process from starting over its warm-up
        name = type(exc).__name__
        log.warning("%s not warmed (%s: %s); its first delivery pays", what, name, exc)
        return False
    log.info("%s warmed in %.0f ms", what, (time.perf_counter() - started) * 1000)
    return True


def _consumed() -> list[str]:
    """The queues this worker consumes (``-Q``, else every declared queue)."""
    return list(app.amqp.queues.consume_from)


def _runs_tasks_here(sender: Any) -> bool:
    """Whether this worker's main process runs the tasks (every pool but prefork)."""
    pool = getattr(sender, "pool", None)
    return "prefork" not in type(pool).__module__


def _warm_worker(what: str) -> None:
    from tasks.settings import get_settings

    steps = steps_for(_consumed(), get_settings().sources)
    if steps:
        warmed(what, steps)


@worker_ready.connect
def _warm_main(sender: Any = None, **kwargs: Any) -> None:
    """Threads, gevent and solo pools run their tasks in the main process."""
    if _runs_tasks_here(sender):
        _warm_worker("this worker")


@worker_process_init.connect
def _warm_child(**kwargs: Any) -> None:
    """A prefork pool process runs its tasks itself."""
    _warm_worker("this pool process")
