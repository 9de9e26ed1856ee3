"""A model worker killed after the model answered: the model is not called again.

In a module of its own: no other model worker may be alive while the doomed one runs, and
this module's neighbours keep one for their whole module.
"""

from __future__ import annotations

import os
import signal

import pytest

import toolfan
from tests.conftest import TEST_HANDLERS
from tests.e2e.test_conversations import model_worker, runs, script, three_steps
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker", "api")


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_a_model_worker_killed_after_the_answer_was_saved_never_calls_it_again(
    api, redis_client, kind
):
    """SIGKILL of the whole model worker right after step 1's answer was saved.

    The worker pauses there (tests/loop_hooks.py), so the kill lands after the save and
    before anything acted on it. The dead worker's message comes back through the other
    workers' reaper (default TOOLFAN_DEAD_AFTER); the next copy finds the answer saved.
    """
    name = f"killed-{kind}"
    prompt = script(api, name, three_steps(f"kill-{kind}"))
    handlers = f"{TEST_HANDLERS},tests.loop_hooks"
    doomed = model_worker(
        f"doomed-{kind}",
        TOOLFAN_HANDLERS=handlers,
        TEST_PAUSE_AFTER_ANSWER="1",
        TEST_PAUSE_SECONDS="60",
    )
    cid = toolfan.start_conversation(api=kind, model="scripted", input=prompt)
    try:
        wait_for(lambda: redis_client.exists(f"test:paused:{cid}"), 60, "the paused step")
        os.killpg(doomed.proc.pid, signal.SIGKILL)
        doomed.proc.wait(10)
    finally:
        doomed.stop()
    survivor = model_worker(f"survivor-{kind}")
    try:
        result = toolfan.conversation_result(cid, timeout=90)
    finally:
        survivor.stop()
    assert result.status == "completed", (result.status, result.reason)
    assert result.text == "Counted: 1"
    assert api.chat.counts(name) == {name: {0: 1, 1: 1, 2: 1}}
    assert runs(redis_client, f"kill-{kind}") == 1
    assert api.chat.calls(refused=True) == []
