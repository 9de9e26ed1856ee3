"""A call still queued when its caller's time runs out never runs.

No worker serves ``fn.inline`` while the call is made, so it waits in its queue past the
timeout and is answered with a timeout error. The worker started afterwards takes the
message, finds that saved error, and returns it without running the function.
"""

from __future__ import annotations

import json

import pytest

import toolfan
from tests.e2e.conftest import inline_worker
from tests.e2e.test_inline import chat_call, runs

pytestmark = pytest.mark.usefixtures("worker", "api")


def test_calls_still_queued_at_the_timeout_never_run(redis_client):
    call = chat_call("queued", "nap", {"key": "never", "seconds": 0})
    [message] = toolfan.run_tool_calls([call], timeout=0.5, conversation_id="conv-queued")
    assert "did not finish within the 0.5 s" in json.loads(message["content"])["error"]
    worker = inline_worker()
    try:
        flush = chat_call("flush", "nap", {"key": "flush", "seconds": 0})
        assert toolfan.run_tool_calls([flush])[0]["content"] == "flush:1"
        assert runs(redis_client, "flush") == 1
        assert runs(redis_client, "never") == 0
        again = toolfan.run_tool_calls([call], timeout=0.5, conversation_id="conv-queued")
        assert again == [message]
    finally:
        worker.stop()


def test_an_inline_only_fleet_needs_no_api_key(redis_client, tmp_path):
    """``TOOLFAN_SOURCES=inline``: workers answer run_tool_calls with no Agents API at all.

    Without it the worker refuses to start without OPENAI_API_KEY (it would submit to the
    Agents API); a poller of nothing refuses, naming the setting.
    """
    import os
    import subprocess
    import sys

    from tests.conftest import worker_env
    from tests.services import ROOT, Worker

    env = worker_env(TOOLFAN_SOURCES="inline")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    args = ["-P", "threads", "-c", "4", "-n", "keyless@%h", "--without-mingle", "--without-gossip"]
    worker = Worker([*args, "-Q", "fn.inline"], tmp_path / "keyless.log", env)
    try:
        worker.wait_ready()
        call = chat_call("keyless", "nap", {"key": "keyless", "seconds": 0})
        assert toolfan.run_tool_calls([call])[0]["content"] == "keyless:1"
    finally:
        worker.stop()
    polled = subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", "poll", "--once"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert polled.returncode != 0 and "inline alone names nothing to poll" in polled.stderr
    assert os.environ.get("TOOLFAN_SOURCES") is None
