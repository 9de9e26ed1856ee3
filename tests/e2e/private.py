"""A test's own worker on ``fn.private``, and a message lost as a dying worker loses it."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from tests.conftest import PRIVATE_QUEUE, worker_env
from tests.services import Worker


def on_redis() -> bool:
    return os.environ["TOOLFAN_BROKER_URL"].startswith("redis")


def private_worker(tmp: Path, name: str, **env: str) -> Worker:
    args = ["-c", "1", "-P", "prefork", "-n", f"{name}@%h", "-Q", PRIVATE_QUEUE]
    return Worker(
        [*args, "--without-mingle", "--without-gossip"], tmp / f"{name}.log", worker_env(**env)
    )


def lose_message_of(key: str) -> bool:
    """Take the queued message of the call marked ``key`` off its queue, as a worker that
    popped it and died before it recorded it as taken does (the reply died in its socket).

    Only that message: a copy an earlier test's worker gave back as it stopped may wait
    on the same queue.
    """
    from tasks.app import app

    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        for raw in client.lrange(PRIVATE_QUEUE, 0, -1):
            if key.encode() in base64.b64decode(json.loads(raw)["body"]):
                return bool(client.lrem(PRIVATE_QUEUE, 1, raw))
    return False
