"""The scripted model's admin routes: scripts, call records and counts, faults, reset.

These are how a tool loop's test in another process scripts the model and proves what
its client did: how many times each step ran, and that nothing it sent was refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from emulator import EmulatorServer
from emulator.chat.faults import ChatFaults
from emulator.testing import TEST_API_KEY

STEPS = [
    {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "call_fixed"}]},
    {"text": "sum: {outputs}"},
]
USER = {"role": "user", "content": "please add"}


@pytest.fixture
def chat_admin(emu: EmulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{emu.url}/_emulator/chat", timeout=5.0) as client:
        yield client


def _ask(sdk: OpenAI, *answers: str) -> str | None:
    """One chat model call: the user message, then the fixed call answered by ``answers``."""
    messages: list[Any] = [USER]
    if answers:
        call = {
            "id": "call_fixed",
            "type": "function",
            "function": {"name": "add", "arguments": "{}"},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages += [{"role": "tool", "tool_call_id": "call_fixed", "content": a} for a in answers]
    return sdk.chat.completions.create(model="m", messages=messages).choices[0].message.content


def test_scripts_are_set_listed_read_and_deleted(chat_admin: httpx.Client, sdk: OpenAI) -> None:
    created = chat_admin.post("/scripts", json={"name": "adder", "match": "add", "steps": STEPS})
    assert created.status_code == 201
    assert created.json() == {"name": "adder", "match": "add", "steps": STEPS}
    chat_admin.post("/scripts", json={"name": "fallback", "steps": [{"text": "hi"}]})

    listing = chat_admin.get("/scripts").json()
    assert [s["name"] for s in listing["data"]] == ["adder", "fallback"]
    assert listing["default"] == "fallback"
    assert listing["builtin"]["name"] == "builtin"
    assert chat_admin.get("/scripts/adder").json()["steps"] == STEPS
    assert _ask(sdk) is None and _ask(sdk, "3") == "sum: 3"

    assert chat_admin.delete("/scripts/fallback").json() == {"deleted": "fallback"}
    assert chat_admin.get("/scripts").json()["default"] == "builtin"
    missing = chat_admin.delete("/scripts/fallback")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "No script named 'fallback'."
    assert chat_admin.get("/scripts/nope").status_code == 404


def test_setting_a_script_again_replaces_it(chat_admin: httpx.Client, sdk: OpenAI) -> None:
    chat_admin.post("/scripts", json={"name": "s", "match": "add", "steps": [{"text": "old"}]})
    chat_admin.post("/scripts", json={"name": "s", "match": "add", "steps": [{"text": "new"}]})

    assert [s["steps"] for s in chat_admin.get("/scripts").json()["data"]] == [[{"text": "new"}]]
    assert _ask(sdk) == "new"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"name": "s", "steps": []}, "at least one step"),
        ({"name": "", "steps": [{}]}, "non-empty string 'name'"),
        ({"name": "s", "steps": [{}], "matches": "x"}, "unknown keys ['matches']"),
        ({"name": "s", "match": "", "steps": [{}]}, "'match' must be a non-empty string"),
        (
            {"name": "s", "steps": [{"text": "a", "tool_calls": [{"name": "f"}]}]},
            "both 'tool_calls' and 'text'",
        ),
        ({"name": "s", "steps": [{"tool_calls": []}]}, "non-empty list of calls"),
        (
            {"name": "s", "steps": [{"tool_calls": [{"arguments": {}}]}]},
            "needs a non-empty string 'name'",
        ),
        (
            {"name": "s", "steps": [{"tool_calls": [{"name": "f", "args": {}}]}]},
            "unknown keys ['args']",
        ),
        (
            {
                "name": "s",
                "steps": [{"tool_calls": [{"name": "f", "id": "c"}, {"name": "g", "id": "c"}]}],
            },
            "same 'id'",
        ),
        ({"name": "s", "steps": [{"text": 5}]}, "text must be a string"),
        ({"name": "s", "steps": "go"}, "must be a list of steps"),
    ],
)
def test_malformed_scripts_are_refused(
    chat_admin: httpx.Client, body: dict[str, Any], fragment: str
) -> None:
    answer = chat_admin.post("/scripts", json=body)

    assert answer.status_code == 400
    assert fragment in answer.json()["error"]["message"]
    assert chat_admin.get("/scripts").json()["data"] == []


def test_calls_and_counts_tell_how_often_each_step_ran(
    emu: EmulatorServer, chat_admin: httpx.Client, sdk: OpenAI
) -> None:
    chat_admin.post("/scripts", json={"name": "adder", "match": "add", "steps": STEPS})
    chat_admin.post("/scripts", json={"name": "other", "steps": [{"text": "other"}]})
    _ask(sdk)
    _ask(sdk, "3")
    _ask(sdk, "3")  # a repeated model call: the same answer, one more count
    sdk.responses.create(model="m", input="something else")
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model="m", messages=[])

    every = chat_admin.get("/calls").json()
    assert [(c["endpoint"], c["script"], c["step"], c["outcome"]) for c in every["data"]] == [
        ("chat.completions", "adder", 0, "ok"),
        ("chat.completions", "adder", 1, "ok"),
        ("chat.completions", "adder", 1, "ok"),
        ("responses", "other", 0, "ok"),
        ("chat.completions", None, None, "refused"),
    ]
    assert every["counts"] == {"adder": {"0": 1, "1": 2}, "other": {"0": 1}}
    first = every["data"][0]
    assert first["request"] == {"model": "m", "messages": [USER]}
    assert first["answer_id"].startswith("chatcmpl-") and first["status"] == 200
    assert (first["surface"], first["path"], first["refused"]) == (
        "openai",
        "/v1/chat/completions",
        False,
    )
    assert isinstance(first["at"], float) and first["seq"] == 1

    adder = chat_admin.get("/calls", params={"script": "adder"}).json()
    assert [c["step"] for c in adder["data"]] == [0, 1, 1]
    assert adder["counts"] == {"adder": {"0": 1, "1": 2}}
    refused = chat_admin.get("/calls", params={"refused": "1"}).json()["data"]
    assert [c["error"]["error"]["code"] for c in refused] == ["empty_array"]
    assert len(chat_admin.get("/calls", params={"refused": "false"}).json()["data"]) == 4
    assert [
        c["seq"] for c in chat_admin.get("/calls", params={"endpoint": "responses"}).json()["data"]
    ] == [4]
    assert [c["seq"] for c in chat_admin.get("/calls", params={"offset": "3"}).json()["data"]] == [
        4,
        5,
    ]
    assert chat_admin.get("/counts", params={"script": "adder"}).json() == {
        "data": {"adder": {"0": 1, "1": 2}}
    }
    assert emu.state.chat.count("adder", 1) == 2 and emu.state.chat.count("adder", 2) == 0
    assert chat_admin.get("/calls", params={"refused": "maybe"}).status_code == 400


def test_the_next_calls_fail_as_told_then_the_model_answers(
    emu: EmulatorServer, chat_admin: httpx.Client, sdk: OpenAI
) -> None:
    put = chat_admin.put("/faults", json={"fail_next": 2, "status": 429, "retry_after": 2.5})
    assert put.json() == {"fail_next": 2, "status": 429, "retry_after": 2.5, "delay": 0.0}

    with pytest.raises(openai.RateLimitError) as throttled:
        _ask(sdk)
    assert throttled.value.response.headers["retry-after"] == "3"
    assert throttled.value.response.headers["retry-after-ms"] == "2500"
    assert chat_admin.get("/faults").json()["fail_next"] == 1
    with pytest.raises(openai.RateLimitError):
        sdk.responses.create(model="m", input="x")
    assert _ask(sdk) is None  # the builtin's tool calls: answered again

    calls = chat_admin.get("/calls").json()
    assert [(c["status"], c["outcome"], c["refused"]) for c in calls["data"]] == [
        (429, "throttle", False),
        (429, "throttle", False),
        (200, "ok", False),
    ]
    assert calls["counts"] == {"builtin": {"0": 1}}  # failed calls never reached the model
    assert chat_admin.get("/calls", params={"refused": "1"}).json()["data"] == []
    assert [r.outcome for r in emu.state.requests("/v1/")] == ["throttle", "throttle", "ok"]


def test_a_server_error_fault_and_a_delay(emu: EmulatorServer, sdk: OpenAI) -> None:
    emu.state.chat.set_faults(fail_next=1, status=500, delay=0.3)

    started = time.monotonic()
    with pytest.raises(openai.InternalServerError):
        _ask(sdk)
    assert _ask(sdk) is None
    elapsed = time.monotonic() - started

    assert elapsed >= 0.6  # both calls waited
    assert [c["outcome"] for c in emu.state.chat.calls()] == ["error", "ok"]
    assert emu.state.chat.faults == ChatFaults(delay=0.3)


def test_an_sdk_with_retries_gets_through_a_failure(emu: EmulatorServer) -> None:
    emu.state.chat.set_faults(fail_next=1, status=503)
    client = OpenAI(api_key=TEST_API_KEY, base_url=emu.base_url, max_retries=1, timeout=5.0)

    answer = client.chat.completions.create(model="m", messages=[USER])  # type: ignore[list-item]

    assert answer.choices[0].finish_reason == "tool_calls"
    assert [c["status"] for c in emu.state.chat.calls()] == [503, 200]
    client.close()


@pytest.mark.parametrize(
    "knobs",
    [{"fail_next": -1}, {"fail_next": 1.5}, {"status": 404}, {"delay": -1}, {"error_rate": 1}],
)
def test_bad_fault_knobs_are_refused(chat_admin: httpx.Client, knobs: dict[str, Any]) -> None:
    answer = chat_admin.put("/faults", json=knobs)

    assert answer.status_code == 400
    assert chat_admin.get("/faults").json()["fail_next"] == 0


def test_reset_forgets_scripts_calls_responses_and_faults(
    emu: EmulatorServer, admin: httpx.Client, chat_admin: httpx.Client, sdk: OpenAI
) -> None:
    chat_admin.post("/scripts", json={"name": "s", "steps": [{"text": "hi"}]})
    stored = sdk.responses.create(model="m", input="x")
    chat_admin.put("/faults", json={"fail_next": 5})

    assert admin.post("/reset").status_code == 200

    assert chat_admin.get("/scripts").json()["data"] == []
    assert chat_admin.get("/calls").json() == {"data": [], "counts": {}}
    assert chat_admin.get("/faults").json()["fail_next"] == 0
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(stored.id)
