"""The Azure flavours of the ``assistants`` source, end to end, each on a stack of its own.

In a module of their own: every runs stack owns databases 12 and 13, so these start only
once the shared stack of ``test_assistants.py`` has stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dispatcher.sources.assistants import batch_id
from dispatcher.sources.assistants_poll import RunsSummary
from tests.e2e.runs_stack import RunsStack
from tests.e2e.test_assistants import call, finished, outputs, watch


@pytest.mark.parametrize("flavour", ["azure-openai", "foundry"])
def test_each_azure_flavour_end_to_end(flavour, tmp_path: Path):
    with RunsStack(tmp_path, flavour) as other:
        run = other.state.create_run(
            [[call("add", {"a": 4, "b": 5})], [call("echo", {"text": "x"})]]
        )
        watch(other, run)
        assert finished(other.state, run)["status"] == "completed"
        submits = other.state.submits(run["thread_id"], run["id"])
        assert [s["flavour"] for s in submits] == [flavour, flavour]
        assert [o for phase in outputs(other.state, run) for _, o in phase] == ["9", "x"]
        time.sleep(0.5)
        assert len(other.state.submits(run["thread_id"], run["id"])) == 2


def test_foundry_runs_are_found_through_the_thread_list_without_a_watch(tmp_path: Path):
    with RunsStack(tmp_path, "foundry", TOOLFAN_RUNS_DISCOVER="threads") as other:
        runs = [other.state.create_run([[call("add", {"a": i, "b": i})]]) for i in range(3)]
        for i, run in enumerate(runs):
            assert finished(other.state, run)["status"] == "completed"
            assert [o for phase in outputs(other.state, run) for _, o in phase] == [str(2 * i)]
        assert other.state.requests("/threads", method="GET")  # found by listing threads
        # Behind a slow API, a discovering pass reads the threads' runs several at once:
        # one after another, 16 threads at 0.3 s a read take 4.8 s.
        more = [other.state.create_run([[call("add", {"a": i, "b": 1})]]) for i in range(16)]
        other.state.set_faults(latency=0.3, endpoints=["runs"])
        poller = other.runs_poller(runs_discover="threads")
        started = time.monotonic()
        found = poller._discovered(RunsSummary(), set())
        elapsed = time.monotonic() - started
        assert elapsed < 3.0, elapsed
        assert {b.batch_id for b in found} <= {batch_id(r["thread_id"], r["id"]) for r in more}
        assert poller._far
        for run in more:
            assert finished(other.state, run)["status"] == "completed"
