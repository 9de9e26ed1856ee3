"""The durable tool loop end to end: model steps on ``toolfan.model``, tools on the fleet.

The model is the emulator's scripted one, called by the official SDK over real HTTP; the
tools run on the session's worker. Model steps run on workers of this module's own (the
session worker does not consume ``toolfan.model``), which one test kills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import toolfan
from tests.conftest import MODEL_QUEUE, worker_env
from tests.e2e.private import lose_message_of, on_redis, private_worker
from tests.services import ROOT, Worker, wait_for

pytestmark = pytest.mark.usefixtures("worker", "api")


def model_worker(name: str, **env: str) -> Worker:
    """A worker on the model queue only, started."""
    log = Path(os.environ["TOOLFAN_TEST_TMP"]) / f"{name}.log"
    args = ["-P", "threads", "-c", "4", "-n", f"{name}@%h", "--without-mingle"]
    w = Worker([*args, "--without-gossip", "-Q", MODEL_QUEUE], log, worker_env(**env))
    w.wait_ready()
    return w


@pytest.fixture(scope="module")
def models() -> Iterator[Worker]:
    w = model_worker("model")
    try:
        yield w
    finally:
        w.stop()


def script(api, name: str, steps: list[dict]) -> str:
    """Set a script chosen by a prompt holding its name; the prompt."""
    api.chat.set_script(name, steps, match=f"[{name}]")
    return f"Please help [{name}]"


THREE_STEPS = [
    {
        "tool_calls": [
            {"name": "add", "arguments": {"a": 2, "b": 3}},
            {"name": "echo", "arguments": {"text": "hello"}},
        ]
    },
    {"tool_calls": [{"name": "count", "arguments": {"key": "{key}"}}]},
    {"text": "Counted: {outputs}"},
]


def three_steps(key: str) -> list[dict]:
    return json.loads(json.dumps(THREE_STEPS).replace("{key}", key))


def runs(redis_client, key: str) -> int:
    return int(redis_client.get(f"test:runs:{key}") or 0)


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_a_three_step_script_completes_with_the_right_text(models, api, redis_client, kind):
    prompt = script(api, f"three-{kind}", three_steps(f"loop-{kind}"))
    cid = toolfan.start_conversation(api=kind, model="scripted", input=prompt)
    result = toolfan.conversation_result(cid, timeout=60)
    assert result.status == "completed", (result.status, result.reason)
    assert result.text == "Counted: 1"
    assert [len(s["tool_calls"]) for s in result.steps] == [2, 1, 0]
    assert [c["output"] for c in result.steps[0]["tool_calls"]] == ["5", "hello"]
    assert api.chat.counts(f"three-{kind}") == {f"three-{kind}": {0: 1, 1: 1, 2: 1}}
    assert runs(redis_client, f"loop-{kind}") == 1
    assert api.chat.calls(refused=True) == []
    first = result.messages[0]
    assert first == {"role": "user", "content": prompt}
    if kind == "chat":
        roles = [m["role"] for m in result.messages]
        assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    else:
        kinds = [m.get("type", "message") for m in result.messages]
        assert kinds.count("function_call") == 3 and kinds.count("function_call_output") == 3


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_every_kind_of_bad_call_reaches_the_model_as_an_error(models, api, kind):
    prompt = script(
        api,
        "bad-calls",
        [
            {
                "tool_calls": [
                    {"name": "add", "arguments": '{"a": 1,'},
                    {"name": "no_such_tool", "arguments": {}},
                    {"name": "boom", "arguments": {}},
                ]
            },
            {"text": "Saw: {outputs}"},
        ],
    )
    cid = toolfan.start_conversation(api=kind, model="scripted", input=prompt)
    result = toolfan.conversation_result(cid, timeout=60)
    assert result.status == "completed"
    outputs = [json.loads(c["output"])["error"] for c in result.steps[0]["tool_calls"]]
    assert "not valid JSON" in outputs[0]
    assert "Unknown function 'no_such_tool'" in outputs[1]
    assert outputs[2]
    assert api.chat.calls(refused=True) == []


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_max_steps_stops_a_loop_that_never_ends(models, api, kind):
    prompt = script(
        api, "forever", [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}]
    )
    cid = toolfan.start_conversation(api=kind, model="scripted", input=prompt, max_steps=3)
    result = toolfan.conversation_result(cid, timeout=60)
    assert result.status == "max_steps"
    assert "3 model steps" in result.reason
    assert len(result.steps) == 3
    assert sum(api.chat.counts("forever")["forever"].values()) == 3
    assert api.chat.calls(refused=True) == []


def test_a_model_that_refuses_fails_the_conversation_with_the_reason(models, api):
    prompt = script(api, "refused", [{"text": "never"}])
    with pytest.raises(toolfan.ConversationError, match="max_steps"):
        toolfan.start_conversation(model="scripted", input=prompt, max_steps=0)
    with pytest.raises(toolfan.ConversationError, match="api"):
        toolfan.start_conversation(api="completions", model="scripted", input=prompt)
    api.chat.set_faults(fail_next=100, status=503)
    cid = toolfan.start_conversation(model="scripted", input=prompt)
    result = toolfan.conversation_result(cid, timeout=90)
    assert result.status == "failed", result
    assert "503" in result.reason


def test_starting_an_existing_conversation_again_changes_nothing(models, api, redis_client):
    prompt = script(api, "again", three_steps("again"))
    cid = toolfan.start_conversation(model="scripted", input=prompt, conversation_id="conv-again")
    assert cid == "conv-again"
    first = toolfan.conversation_result(cid, timeout=60)
    assert toolfan.start_conversation(model="scripted", input=prompt, conversation_id=cid) == cid
    time.sleep(1.0)
    assert toolfan.conversation_result(cid) == first
    assert runs(redis_client, "again") == 1
    assert sum(api.chat.counts("again")["again"].values()) == 3


def toolfan_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=worker_env(),
        cwd=ROOT,
    )


def test_toolfan_chat_prints_the_steps_and_the_answer(models, api):
    prompt = script(api, "cli", three_steps("cli"))
    done = toolfan_cli("chat", prompt, "--model", "scripted")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Counted: 1"
    assert "step 0: add(" in done.stderr and "-> 5" in done.stderr
    assert "[completed]" in done.stderr
    cid = done.stderr.rsplit("conversation ", 1)[1].strip()
    shown = toolfan_cli("inspect", cid)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["status"] == "completed" and len(view["steps"]) == 3
    assert [s["model_calls"] for s in view["steps"]] == [1, 1, 1]
    assert view["steps"][0]["batch"]["calls"][0]["state"] == "submitted"


def test_a_tool_call_whose_message_died_with_its_worker_runs_again_before_the_deadline(
    models, api, redis_client, tmp_path
):
    # The step's looks (every TOOLFAN_DEAD_AFTER + 3 beats, 16 s) dispatch the call again;
    # without them it was answered with a timeout error at the step's 60 s deadline.
    if not on_redis():
        pytest.skip("RabbitMQ keeps a message until a consumer acks it: none is lost this way")
    key = uuid.uuid4().hex
    steps = [
        {"tool_calls": [{"name": "private_slow", "arguments": {"key": key}}]},
        {"text": "Got: {outputs}"},
    ]
    prompt = script(api, f"lost-{key}", steps)
    started = time.monotonic()
    cid = toolfan.start_conversation(api="chat", model="scripted", input=prompt)
    wait_for(lambda: lose_message_of(key), 30, "the call's message", 0.01)
    redis_client.zadd("toolfan:workers", {"ghost@host#4": time.time()})
    worker = private_worker(tmp_path, "late")
    try:
        worker.wait_ready()
        result = toolfan.conversation_result(cid, timeout=50)
    finally:
        worker.stop()
    assert result.status == "completed", (result.status, result.reason)
    assert result.text == "Got: 1"
    assert time.monotonic() - started < 50  # the step's deadline is 60 s
    assert runs(redis_client, key) == 1
