"""Runaway tools are stopped: an overrun call does not burn a core for as long as its
worker lives, and a leaking pool process is replaced.

Earlier, a sync tool past its timeout had its result abandoned while its thread spun on
(200 calls took 2.4 times as long behind one such tool), and leaked memory was never given
back.
"""

import time
import uuid

import pytest

from emulator import function_call
from tests.conftest import PRIVATE_QUEUE, worker_env
from tests.e2e.harness import poll_loop
from tests.services import Worker, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def progress(redis_client, key: str) -> int:
    return int(redis_client.get(f"test:spin:{key}") or 0)


def still(redis_client, key: str, seconds: float = 0.6) -> bool:
    """Whether the tool's progress counter stopped moving."""
    before = progress(redis_client, key)
    time.sleep(seconds)
    return progress(redis_client, key) == before


@pytest.mark.parametrize("tool", ["spin", "stubborn"])
def test_an_overrun_tool_is_answered_and_then_stopped(api, redis_client, worker, tool):
    key = uuid.uuid4().hex
    sid = api.create_session([function_call(tool, {"key": key}, turn_id="t", call_id="c")])["id"]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 30, "the answer", 0.1)
    assert api.batches(sid)[0].events[0]["error"] == f"Function '{tool}' timed out after 1 s"
    assert progress(redis_client, key) > 0
    # spin is interrupted on the pool process's own thread; stubborn swallows that, so the
    # watchdog saves its answer and ends the process; the message, delivered again, finds it.
    wait_for(lambda: still(redis_client, key), 10, "the runaway to stop")
    if tool == "stubborn":
        wait_for(lambda: "recycling this pool process" in worker.log(), 10, "the recycle")
        assert "would not stop; its answer is saved for the redelivered message" in worker.log()


def test_a_prefork_pool_process_runs_the_call_on_its_own_thread(api):
    # No runner thread between the task and the call: the timer on that thread times it.
    sid = api.create_session([function_call("thread_name", {}, turn_id="t", call_id="c")])["id"]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 30, "the answer", 0.1)
    assert api.batches(sid)[0].events[0]["output"] == "MainThread"


def test_a_pool_process_grown_past_its_memory_ceiling_is_replaced(api, tmp_path):
    # The default ceiling is 1,024 MiB; a 150 MiB one keeps the test small and fast.
    private = Worker(
        ["-c", "1", "-P", "prefork", "-n", "memory@%h", "-Q", PRIVATE_QUEUE],
        tmp_path / "memory.log",
        worker_env(TOOLFAN_MAX_MEMORY_PER_CHILD="150"),
    )
    try:
        private.wait_ready()
        calls = [
            function_call("hoard", {"megabytes": 200}, turn_id="t", call_id=f"c{i}")
            for i in range(2)
        ]
        sid = api.create_session(calls)["id"]
        with poll_loop():
            wait_for(lambda: api.batches(sid), 60, "the answer", 0.1)
    finally:
        private.stop()
    pids = [e["output"] for e in api.batches(sid)[0].events]
    assert len(set(pids)) == 2, f"both calls ran in one process: {pids}"
