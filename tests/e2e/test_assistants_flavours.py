"""The Azure flavours of the ``assistants`` source, end to end, each on a stack of its own.

In a module of their own: every runs stack owns databases 12 and 13, so these start only
once the shared stack of ``test_assistants.py`` has stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

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
