"""Hostile calls through the real path: each one costs itself, never its session's batch.

Earlier, arguments nested ~1,000 deep (a RecursionError while parsing) or an output with a
lone surrogate (an encoding error while saving) made ``execute`` raise: the chord broke,
the good results of the session waited three leases, and the call was finally answered
with a poison message blaming a crash that never happened.
"""

import json
import os
import uuid
from pathlib import Path

import pytest

from emulator import function_call
from tests.e2e.harness import poll_loop
from tests.services import wait_for

pytestmark = [pytest.mark.usefixtures("worker"), pytest.mark.quick]


def answer(api, sid: str, timeout: float = 30) -> dict[str, dict]:
    wait_for(lambda: api.batches(sid), timeout, "the session's answer", 0.1)
    batches = api.batches(sid)
    assert len(batches) == 1
    return {e["call_id"]: e for e in batches[0].events}


def test_deep_arguments_and_a_lone_surrogate_cost_only_their_own_calls(api, redis_client):
    key = uuid.uuid4().hex
    calls = [
        function_call("add", "[" * 1_000 + "]" * 1_000, turn_id="t", call_id="deep"),
        function_call("emit", {"kind": "surrogate", "text": "s:"}, turn_id="t", call_id="sur"),
        function_call("count", {"key": key}, turn_id="t", call_id="good"),
    ]
    sid = api.create_session(calls)["id"]
    with poll_loop():
        events = answer(api, sid)
    assert events["deep"]["error"] == "Invalid arguments for add: nested deeper than 64 levels"
    # The pair of surrogates is one emoji; the lone one becomes U+FFFD.
    assert events["sur"]["output"] == "s:\ufffd-\U0001f600"
    assert events["good"]["output"] == "1"
    assert redis_client.get(f"test:runs:{key}") == "1"
    assert "poison" not in json.dumps(api.batches(sid)[0].events)


def test_arguments_the_poller_cannot_hold_are_answered_without_reaching_a_tool(api):
    raw_deep = '{"a": ' + "[" * 5_000 + "]" * 5_000 + ', "b": 1}'
    raw_big = '{"a": ' + "9" * 5_000 + ', "b": 1}'
    sid = api.create_session(
        [function_call("add", {"a": 1, "b": 2}, turn_id="t", call_id="fine")],
        raw_actions=[
            {"json": _raw_call("deep", raw_deep), "turn_id": "t", "call_id": "deep"},
            {"json": _raw_call("big", raw_big), "turn_id": "t", "call_id": "big"},
        ],
    )["id"]
    with poll_loop():
        events = answer(api, sid)
    assert events["fine"]["output"] == "3"
    assert events["deep"]["error"] == "Invalid arguments for add: nested deeper than 64 levels"
    assert events["big"]["error"].startswith("Invalid arguments for add: a number with 5,000")


def _raw_call(call_id: str, arguments: str) -> str:
    head = json.dumps({"type": "function_call", "turn_id": "t", "call_id": call_id, "name": "add"})
    return head[:-1] + ', "arguments": ' + arguments + "}"


def test_huge_failures_are_cut_in_the_batch_and_in_the_log(api):
    size = 5_000_000
    calls = [
        function_call("emit", {"kind": "tool_error", "size": size}, turn_id="t", call_id="te"),
        function_call("emit", {"kind": "exception", "size": size}, turn_id="t", call_id="ex"),
        function_call(
            "emit", {"kind": "image", "size": size, "text": "a"}, turn_id="t", call_id="im"
        ),
        function_call(
            "emit", {"kind": "parts", "size": 20_000, "text": "p"}, turn_id="t", call_id="pa"
        ),
        function_call("add", {"a": 1, "b": 2, "k" * 500_000: 1}, turn_id="t", call_id="key"),
        function_call("add", {"a": 1, "b": 2}, turn_id="t", call_id="fine"),
    ]
    sid = api.create_session(calls)["id"]
    with poll_loop():
        events = answer(api, sid, 60)
    assert events["fine"]["output"] == "3"
    for call_id in ("te", "ex", "im", "pa", "key"):
        assert events[call_id]["success"] is False
        assert len(events[call_id]["error"]) <= 4_000
    assert "at most 2,000,000" in events["im"]["error"]
    assert "20,000 parts" in events["pa"]["error"]
    assert "Extra inputs are not permitted" in events["key"]["error"]
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / "worker.log"
    longest = max(len(line) for line in log.read_text(errors="replace").splitlines())
    assert longest < 25_000, f"a worker log line of {longest:,} characters"


def test_a_call_with_no_usable_name_is_answered_and_its_neighbours_too(api):
    sid = api.create_session(
        [
            {"type": "function_call", "turn_id": "t", "call_id": "nameless", "arguments": {}},
            {"type": "function_call", "turn_id": "t", "call_id": "odd", "name": 5},
            function_call("add", {"a": 2, "b": 2}, turn_id="t", call_id="fine"),
        ]
    )["id"]
    with poll_loop():
        events = answer(api, sid)
    assert events["fine"]["output"] == "4"
    assert events["nameless"]["error"].startswith("Unknown function ''")
    assert events["odd"]["error"].startswith("Unknown function ''")
