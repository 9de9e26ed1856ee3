"""The fleet as a function call: ``run_tool_calls`` and ``run_function_calls`` end to end.

Real workers on a real Redis: the session's prefork worker answers the control queue and
the test tools, and a threads worker with concurrency 8 serves ``fn.inline``, where four
calls of half a second must run at once. The calls are the official SDK's own objects
(and dicts), as an application holds them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

import toolfan

pytestmark = pytest.mark.usefixtures("worker", "api")


def chat_call(call_id: str, name: str, arguments: object) -> ChatCompletionMessageFunctionToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ChatCompletionMessageFunctionToolCall.model_validate(
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
    )


def function_call(call_id: str, name: str, arguments: object) -> ResponseFunctionToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ResponseFunctionToolCall.model_validate(
        {
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": text,
            "id": f"fc_{call_id}",
            "status": "completed",
        }
    )


def runs(redis_client, key: str) -> int:
    return int(redis_client.get(f"test:runs:{key}") or 0)


def test_four_parallel_calls_come_back_at_once_and_in_order(threads_worker, redis_client):
    toolfan.run_tool_calls([chat_call("warm", "nap", {"key": "warm", "seconds": 0})])
    calls = [chat_call(f"call_{i}", "nap", {"key": f"k{i}"}) for i in range(4)]
    started = time.perf_counter()
    messages = toolfan.run_tool_calls(calls, conversation_id="conv-parallel")
    elapsed = time.perf_counter() - started
    assert [m["tool_call_id"] for m in messages] == [f"call_{i}" for i in range(4)]
    assert [m["content"] for m in messages] == [f"k{i}:1" for i in range(4)]
    assert all(m["role"] == "tool" for m in messages)
    assert elapsed < 1.5, f"four 0.5 s calls took {elapsed:.2f} s: they did not run at once"


def test_every_kind_of_failure_is_an_error_json_the_model_can_read(threads_worker):
    calls = [
        chat_call("bad_json", "add", '{"a": 1, "b": '),
        chat_call("unknown", "no_such_function", {}),
        chat_call("raises", "boom", {}),
        chat_call("slow", "sleepy", {"seconds": 3}),
        chat_call("invalid", "add", {"a": "one", "b": 2}),
        {
            "id": "dict_ok",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
        },
    ]
    messages = toolfan.run_tool_calls(calls, conversation_id="conv-failures")
    content = {m["tool_call_id"]: m["content"] for m in messages}
    assert content["dict_ok"] == "5"
    errors = {k: json.loads(v)["error"] for k, v in content.items() if k != "dict_ok"}
    assert "not valid JSON" in errors["bad_json"]
    assert "Unknown function 'no_such_function'" in errors["unknown"]
    assert "kaboom" in errors["raises"] or "RuntimeError" in errors["raises"]
    assert "timed out" in errors["slow"] or "time" in errors["slow"].lower()
    assert "a:" in errors["invalid"]


def test_a_repeat_gets_the_saved_results_and_runs_nothing_again(threads_worker, redis_client):
    calls = [chat_call(f"rep_{i}", "nap", {"key": f"rep{i}", "seconds": 0.1}) for i in range(3)]
    first = toolfan.run_tool_calls(calls, conversation_id="conv-repeat")
    again = toolfan.run_tool_calls(list(reversed(calls)), conversation_id="conv-repeat")
    assert {m["tool_call_id"]: m["content"] for m in again} == {
        m["tool_call_id"]: m["content"] for m in first
    }
    assert [m["tool_call_id"] for m in again] == ["rep_2", "rep_1", "rep_0"]
    assert [runs(redis_client, f"rep{i}") for i in range(3)] == [1, 1, 1]
    other = toolfan.run_tool_calls(calls, conversation_id="another-conversation")
    assert [m["content"] for m in other] == [f"rep{i}:2" for i in range(3)]


def test_a_timeout_answers_unfinished_calls_and_a_repeat_gets_that_answer(
    threads_worker, redis_client
):
    calls = [
        chat_call("quick", "nap", {"key": "t-quick", "seconds": 0}),
        chat_call("late", "nap", {"key": "t-late", "seconds": 3}),
    ]
    started = time.perf_counter()
    messages = toolfan.run_tool_calls(calls, timeout=1.0, conversation_id="conv-timeout")
    assert time.perf_counter() - started < 2.0
    content = {m["tool_call_id"]: m["content"] for m in messages}
    assert content["quick"] == "t-quick:1"
    assert "did not finish within the 1 s" in json.loads(content["late"])["error"]
    time.sleep(3.5)  # the late call finishes meanwhile; its result must not replace the error
    assert toolfan.run_tool_calls(calls, timeout=1.0, conversation_id="conv-timeout") == messages


def test_run_function_calls_runs_function_call_items_and_skips_the_rest(
    threads_worker, redis_client
):
    message = ResponseOutputMessage.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
        }
    )
    items = [
        message,
        *(function_call(f"fc{i}", "nap", {"key": f"fc{i}"}) for i in range(4)),
        {"type": "function_call", "call_id": "fc_bad", "name": "add", "arguments": "{oops"},
        function_call("fc_unknown", "nope", {}),
    ]
    started = time.perf_counter()
    outputs = toolfan.run_function_calls(items, conversation_id="resp-1")
    assert time.perf_counter() - started < 1.5
    assert [o["call_id"] for o in outputs] == [
        *(f"fc{i}" for i in range(4)),
        "fc_bad",
        "fc_unknown",
    ]
    assert all(o["type"] == "function_call_output" for o in outputs)
    assert [o["output"] for o in outputs[:4]] == [f"fc{i}:1" for i in range(4)]
    assert "not valid JSON" in json.loads(outputs[4]["output"])["error"]
    assert "Unknown function 'nope'" in json.loads(outputs[5]["output"])["error"]
    assert toolfan.run_function_calls(items, conversation_id="resp-1") == outputs
    assert [runs(redis_client, f"fc{i}") for i in range(4)] == [1, 1, 1, 1]


def test_the_async_twins_wait_on_one_event_loop_thread(threads_worker, redis_client):
    async def main() -> tuple[list, list]:
        chat = [chat_call(f"a{i}", "nap", {"key": f"a{i}"}) for i in range(4)]
        items = [function_call(f"b{i}", "nap", {"key": f"b{i}"}) for i in range(4)]
        return await asyncio.gather(
            toolfan.arun_tool_calls(chat, conversation_id="async"),
            toolfan.arun_function_calls(items, conversation_id="async"),
        )

    threads_before = threading.active_count()
    started = time.perf_counter()
    messages, outputs = asyncio.run(main())
    assert time.perf_counter() - started < 1.5
    assert [m["content"] for m in messages] == [f"a{i}:1" for i in range(4)]
    assert [o["output"] for o in outputs] == [f"b{i}:1" for i in range(4)]
    assert threading.active_count() <= threads_before + 8


def test_waiters_of_one_batch_all_get_its_answer(threads_worker, redis_client):
    """Two processes' worth of callers repeating one batch at once: one dispatch, one run."""
    calls = [chat_call("shared", "nap", {"key": "shared", "seconds": 0.3})]
    answers: list[list] = []

    def call() -> None:
        answers.append(toolfan.run_tool_calls(calls, conversation_id="conv-shared"))

    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(answers) == 5 and all(a == answers[0] for a in answers)
    assert answers[0][0]["content"] == "shared:1"
    assert runs(redis_client, "shared") == 1


def test_allowed_limits_the_functions_and_refused_calls_never_run(threads_worker, redis_client):
    calls = [
        chat_call("ok", "nap", {"key": "al-ok", "seconds": 0}),
        chat_call("no", "count", {"key": "al-no"}),
    ]
    messages = toolfan.run_tool_calls(calls, allowed={"nap"}, conversation_id="conv-allowed")
    assert messages[0]["content"] == "al-ok:1"
    assert "is not available" in json.loads(messages[1]["content"])["error"]
    assert runs(redis_client, "al-no") == 0


def test_calls_without_an_id_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="no 'id'"):
        toolfan.run_tool_calls([{"type": "function", "function": {"name": "add"}}])
    with pytest.raises(ValueError, match="timeout"):
        toolfan.run_tool_calls([chat_call("x", "add", {})], timeout=0)
    assert toolfan.run_tool_calls([]) == []


def test_a_wait_longer_than_redis_socket_timeout_still_gets_its_answer(threads_worker):
    """redis-py times socket reads out after 5 s by default; a wait must outlast that."""
    [message] = toolfan.run_tool_calls([chat_call("long", "nap", {"key": "long", "seconds": 6})])
    assert message["content"] == "long:1"


def test_run_function_calls_answers_exceptions_and_timeouts_with_error_json(threads_worker):
    items = [
        function_call("fx_boom", "boom", {}),
        function_call("fx_slow", "nap", {"key": "fx-slow", "seconds": 3}),
        function_call("fx_ok", "add", {"a": 1, "b": 1}),
    ]
    outputs = toolfan.run_function_calls(items, timeout=1.5, conversation_id="resp-errors")
    by_id = {o["call_id"]: o["output"] for o in outputs}
    assert by_id["fx_ok"] == "2"
    assert "kaboom" in json.loads(by_id["fx_boom"])["error"]
    assert "did not finish within the 1.5 s" in json.loads(by_id["fx_slow"])["error"]
