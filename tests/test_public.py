"""The public ``toolfan`` package: what applications import."""

from __future__ import annotations

from types import ModuleType

import pytest

import toolfan


def test_the_public_names_are_sorted_complete_and_typed():
    public = sorted(
        n
        for n, v in vars(toolfan).items()
        if not n.startswith("_") and not isinstance(v, ModuleType)
    )
    assert toolfan.__all__ == sorted(toolfan.__all__)
    assert sorted(toolfan.__all__) == public
    promised = {
        "RUN_AGAIN",
        "ToolError",
        "tool",
        "tool_definitions",
        "watch_run",
        "run_tool_calls",
        "arun_tool_calls",
        "run_function_calls",
        "arun_function_calls",
        "start_conversation",
        "conversation_result",
        "CallContext",
        "call_context",
        "Allow",
        "Deny",
    }
    assert promised <= set(toolfan.__all__)
    from importlib.resources import files

    assert files("toolfan").joinpath("py.typed").is_file()


def test_watch_run_hands_a_run_to_the_pollers_once(redis_client):
    from dispatcher.sources.assistants_watch import Watches

    assert toolfan.watch_run("thread_1", "run_1") is True
    assert toolfan.watch_run("thread_1", "run_1") is False  # watching twice is harmless
    assert toolfan.watch_runs([("thread_1", "run_1"), ("thread/2", "run:2")]) == 1
    watched = {(w.thread_id, w.run_id) for w in Watches(redis_client).all()}
    assert watched == {("thread_1", "run_1"), ("thread/2", "run:2")}


@pytest.mark.parametrize("bad", ["", ".", "..", "x" * 70_000, 5, None])
def test_a_run_no_request_could_read_is_refused_and_nothing_is_watched(redis_client, bad):
    from dispatcher.sources.assistants_watch import Watches

    with pytest.raises(ValueError, match="cannot name a run"):
        toolfan.watch_runs([("thread_ok", "run_ok"), ("thread_1", bad)])
    with pytest.raises(ValueError, match="cannot name a run"):
        toolfan.watch_run(bad, "run_1")
    assert Watches(redis_client).all() == []
