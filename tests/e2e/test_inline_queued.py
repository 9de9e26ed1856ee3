"""A call still queued when its caller's time runs out never runs.

No worker serves ``fn.inline`` while the call is made, so it waits in its queue past the
timeout and is answered with a timeout error. The worker started afterwards takes the
message, finds that saved error, and returns it without running the function.
"""

from __future__ import annotations

import json

import pytest

import toolfan
from tests.e2e.test_inline import chat_call, inline_worker, runs

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
