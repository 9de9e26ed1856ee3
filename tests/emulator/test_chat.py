"""The scripted model through the official SDK, over real HTTP: tool loops of both APIs.

A client here behaves like an application: it runs the tools the model asks for and
sends their outputs back, until the model answers with text. The script decides what the
model asks at each step, so every assertion about ids, steps and texts is exact.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import AzureOpenAI, OpenAI
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from emulator import EmulatorServer, running_emulator
from emulator.testing import TEST_API_KEY

AZURE_VERSION = "2024-10-21"
BEARER = {"Authorization": f"Bearer {TEST_API_KEY}"}

#: The tools of the application under test: deterministic, and each output names its input.
TOOLS: dict[str, Callable[[dict[str, Any]], str]] = {
    "get_weather": lambda a: f"weather in {a['city']}",
    "get_customer": lambda a: f"customer {a['customer_id']}",
    "add": lambda a: str(a["a"] + a["b"]),
}
CHAT_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in TOOLS
]
RESPONSE_TOOLS: list[Any] = [
    {"type": "function", "name": n, "parameters": {"type": "object"}, "strict": False}
    for n in TOOLS
]

THREE_STEPS = [
    {"tool_calls": [{"name": "get_customer", "arguments": {"customer_id": "123"}}]},
    {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris"}},
            {"name": "get_weather", "arguments": {"city": "Rome"}},
        ]
    },
    {"text": "Forecast: {outputs}."},
]
FORECAST = "Forecast: weather in Paris | weather in Rome."


def run_tool(name: str, arguments: str) -> str:
    """What an application does with one call: run it, or report arguments it cannot read."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return f"error: {name} got arguments that are not JSON"
    return TOOLS[name](parsed)


def chat_loop(
    client: OpenAI,
    prompt: str,
    *,
    model: str = "gpt-4o",
    max_steps: int = 10,
    reverse: bool = False,
) -> list[ChatCompletion]:
    """Call the model until it answers with text (or ``max_steps`` calls were made).

    ``reverse`` sends the tool messages in the opposite order of the calls: the model must
    still see the outputs in call order.
    """
    messages: list[Any] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": prompt},
    ]
    completions: list[ChatCompletion] = []
    for _ in range(max_steps):
        completion = client.chat.completions.create(
            model=model, messages=messages, tools=CHAT_TOOLS
        )
        completions.append(completion)
        message = completion.choices[0].message
        if not message.tool_calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [call.model_dump(exclude_none=True) for call in message.tool_calls],
            }
        )
        answers = [
            {
                "role": "tool",
                "tool_call_id": c.id,
                "content": run_tool(c.function.name, c.function.arguments),
            }
            for c in message.tool_calls
            if c.type == "function"
        ]
        messages.extend(reversed(answers) if reverse else answers)
    return completions


def responses_loop(
    client: OpenAI, prompt: str, *, chained: bool, model: str = "gpt-4o", max_steps: int = 10
) -> list[Response]:
    """The same loop on Responses: replaying the whole input, or chaining by response id."""
    items: list[Any] = [{"role": "user", "content": prompt}]
    previous: str | None = None
    responses: list[Response] = []
    for _ in range(max_steps):
        response = client.responses.create(
            model=model,
            input=items,
            tools=RESPONSE_TOOLS,
            instructions="be brief",
            previous_response_id=previous,
        )
        responses.append(response)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            break
        outputs = [
            {
                "type": "function_call_output",
                "call_id": c.call_id,
                "output": run_tool(c.name, c.arguments),
            }
            for c in calls
        ]
        if chained:
            items, previous = outputs, response.id
        else:
            items = [*items, *(c.model_dump(exclude_none=True) for c in calls), *outputs]
    return responses


@pytest.fixture
def azure(emu: EmulatorServer) -> Iterator[AzureOpenAI]:
    client = AzureOpenAI(
        azure_endpoint=emu.url,
        api_key="azure-key",
        api_version=AZURE_VERSION,
        max_retries=0,
        timeout=5.0,
    )
    yield client
    client.close()


@pytest.fixture
def azure_v1(emu: EmulatorServer) -> Iterator[OpenAI]:
    """Azure's version-less API, as ``azure-ai-projects`` 2.x reaches it: a plain client."""
    client = OpenAI(
        api_key="azure-key", base_url=f"{emu.url}/openai/v1", max_retries=0, timeout=5.0
    )
    yield client
    client.close()


def _calls(emu: EmulatorServer, **filters: Any) -> list[dict[str, Any]]:
    return emu.state.chat.calls(**filters)


# --- the three-step round trip ------------------------------------------------------------------


def test_chat_three_step_round_trip_with_parallel_calls(emu: EmulatorServer, sdk: OpenAI) -> None:
    emu.state.chat.set_script("forecast", THREE_STEPS, match="forecast")

    completions = chat_loop(sdk, "the forecast for my trip, please", reverse=True)

    assert [c.choices[0].finish_reason for c in completions] == ["tool_calls", "tool_calls", "stop"]
    assert all(isinstance(c, ChatCompletion) for c in completions)
    first, second, final = (c.choices[0].message for c in completions)
    assert first.tool_calls is not None and second.tool_calls is not None
    assert [
        (c.function.name, c.function.arguments) for c in first.tool_calls if c.type == "function"
    ] == [("get_customer", '{"customer_id": "123"}')]
    assert [
        json.loads(c.function.arguments) for c in second.tool_calls if c.type == "function"
    ] == [
        {"city": "Paris"},
        {"city": "Rome"},
    ]
    assert all(c.id.startswith("call_") for c in [*first.tool_calls, *second.tool_calls])
    assert first.content is None and final.tool_calls is None and final.refusal is None
    assert final.content == FORECAST  # in call order, though the client answered in reverse
    assert completions[0].id.startswith("chatcmpl-") and completions[0].object == "chat.completion"
    assert emu.state.chat.counts("forecast") == {"forecast": {0: 1, 1: 1, 2: 1}}
    assert [(c["step"], c["turn"], c["outcome"]) for c in _calls(emu)] == [
        (0, 0, "ok"),
        (1, 1, "ok"),
        (2, 2, "ok"),
    ]
    assert [c["answer_id"] for c in _calls(emu)] == [c.id for c in completions]


@pytest.mark.parametrize("chained", [False, True], ids=["replayed-input", "previous-response-id"])
def test_responses_three_step_round_trip_with_parallel_calls(
    emu: EmulatorServer, sdk: OpenAI, chained: bool
) -> None:
    emu.state.chat.set_script("forecast", THREE_STEPS, match="forecast")

    responses = responses_loop(sdk, "the forecast for my trip, please", chained=chained)

    assert len(responses) == 3 and all(isinstance(r, Response) for r in responses)
    assert [[o.type for o in r.output] for r in responses] == [
        ["function_call"],
        ["function_call", "function_call"],
        ["message"],
    ]
    assert responses[-1].output_text == FORECAST
    assert responses[0].output_text == ""  # tool calls only
    calls = [o for r in responses[:2] for o in r.output if o.type == "function_call"]
    assert all(c.call_id.startswith("call_") and (c.id or "").startswith("fc_") for c in calls)
    assert all(c.status == "completed" for c in calls)
    assert [r.status for r in responses] == ["completed"] * 3
    assert all(r.id.startswith("resp_") for r in responses)
    assert [r.previous_response_id for r in responses] == (
        [None, responses[0].id, responses[1].id] if chained else [None, None, None]
    )
    assert responses[0].instructions == "be brief"
    assert [t.name for t in responses[0].tools if t.type == "function"] == list(TOOLS)
    assert emu.state.chat.counts() == {"forecast": {0: 1, 1: 1, 2: 1}}
    assert _calls(emu, refused=True) == []


def test_the_tool_loop_of_a_default_script_without_any_script(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    """The built-in script: the example tools in parallel, with arguments they accept."""
    completions = chat_loop(sdk, "anything at all")

    first = completions[0].choices[0].message.tool_calls
    assert first is not None
    assert [
        (c.function.name, json.loads(c.function.arguments)) for c in first if c.type == "function"
    ] == [
        ("get_weather", {"city": "Paris"}),
        ("get_customer", {"customer_id": "123"}),
    ]
    assert (
        completions[-1].choices[0].message.content
        == "Tool outputs: weather in Paris | customer 123"
    )
    assert [c["script"] for c in _calls(emu)] == ["builtin", "builtin"]

    responses = responses_loop(sdk, "anything at all", chained=True)
    assert responses[-1].output_text == "Tool outputs: weather in Paris | customer 123"


# --- determinism --------------------------------------------------------------------------------


def _without_created(completion: ChatCompletion) -> dict[str, Any]:
    return completion.model_dump(exclude={"created"})


def test_the_same_chat_request_gets_the_same_answer_and_ids(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    emu.state.chat.set_script("forecast", THREE_STEPS, match="forecast")
    messages: list[Any] = [{"role": "user", "content": "forecast"}]

    one = sdk.chat.completions.create(model="gpt-4o", messages=messages)
    two = sdk.chat.completions.create(model="gpt-4o", messages=messages)
    other = sdk.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "forecast?"}]
    )

    assert _without_created(one) == _without_created(two)
    assert one.id == two.id
    assert one.choices[0].message.tool_calls == two.choices[0].message.tool_calls
    ids = [c.id for c in one.choices[0].message.tool_calls or []]
    other_ids = [c.id for c in other.choices[0].message.tool_calls or []]
    assert len(ids) == 1 and other_ids != ids  # another conversation: other ids
    # Only counting tells the repeat from the first call.
    assert emu.state.chat.count("forecast", 0) == 3


def test_the_same_responses_request_gets_the_same_answer_and_ids(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    emu.state.chat.set_script("forecast", THREE_STEPS, match="forecast")

    one = sdk.responses.create(model="gpt-4o", input="forecast")
    two = sdk.responses.create(model="gpt-4o", input="forecast")

    assert one.id == two.id
    assert one.output == two.output
    assert emu.state.chat.count("forecast", 0) == 2
    assert [c["answer_id"] for c in _calls(emu)] == [one.id, one.id]


def test_answers_validate_strictly_against_the_sdk_models(emu: EmulatorServer) -> None:
    """The SDK parses leniently; strict validation proves no required field is missing."""
    emu.state.chat.set_script(
        "two", [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}, {}]
    )
    url = emu.base_url
    asked = httpx.post(
        f"{url}/chat/completions",
        headers=BEARER,
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    ).json()
    call = asked["choices"][0]["message"]["tool_calls"][0]
    answered = httpx.post(
        f"{url}/chat/completions",
        headers=BEARER,
        json={
            "model": "m",
            "messages": [
                {"role": "user", "content": "x"},
                asked["choices"][0]["message"],
                {"role": "tool", "tool_call_id": call["id"], "content": "3"},
            ],
        },
    ).json()
    for raw in (asked, answered):
        ChatCompletion.model_validate(raw)  # raises on any missing or mistyped field
    assert answered["choices"][0]["message"]["content"] == "Tool outputs: 3"
    assert answered["choices"][0]["finish_reason"] == "stop"

    first = httpx.post(f"{url}/responses", headers=BEARER, json={"model": "m", "input": "x"}).json()
    second = httpx.post(
        f"{url}/responses",
        headers=BEARER,
        json={
            "model": "m",
            "previous_response_id": first["id"],
            "input": [
                {
                    "type": "function_call_output",
                    "call_id": first["output"][0]["call_id"],
                    "output": "3",
                }
            ],
        },
    ).json()
    for raw in (first, second):
        assert Response.model_validate(raw).status == "completed"
    assert Response.model_validate(second).output_text == "Tool outputs: 3"


# --- scripts: invalid arguments, loops, repeats, matching -------------------------------------


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_invalid_json_arguments_arrive_verbatim(emu: EmulatorServer, sdk: OpenAI, api: str) -> None:
    broken = '{"city": "Par'
    emu.state.chat.set_script(
        "broken",
        [{"tool_calls": [{"name": "get_weather", "arguments": broken}]}, {"text": "{outputs}"}],
    )

    if api == "chat":
        completions = chat_loop(sdk, "weather")
        calls = completions[0].choices[0].message.tool_calls or []
        arguments = [c.function.arguments for c in calls if c.type == "function"]
        final = completions[-1].choices[0].message.content
    else:
        responses = responses_loop(sdk, "weather", chained=True)
        arguments = [o.arguments for o in responses[0].output if o.type == "function_call"]
        final = responses[-1].output_text

    assert arguments == [broken]
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments[0])
    assert final == "error: get_weather got arguments that are not JSON"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_final_tool_call_step_loops_until_the_client_stops(
    emu: EmulatorServer, sdk: OpenAI, api: str
) -> None:
    emu.state.chat.set_script(
        "loop", [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}]
    )

    if api == "chat":
        made = chat_loop(sdk, "count", max_steps=5)
        finished = [c.choices[0].finish_reason for c in made]
        ids = [c.id for m in made for c in m.choices[0].message.tool_calls or []]
    else:
        replies = responses_loop(sdk, "count", chained=False, max_steps=5)
        finished = [
            "tool_calls" if r.output[0].type == "function_call" else "stop" for r in replies
        ]
        ids = [o.call_id for r in replies for o in r.output if o.type == "function_call"]

    assert finished == ["tool_calls"] * 5  # never a text: only the client's limit ends it
    assert len(set(ids)) == 5  # a new call each turn, though the step is the same
    assert emu.state.chat.counts() == {"loop": {0: 5}}
    assert [c["turn"] for c in _calls(emu)] == [0, 1, 2, 3, 4]


def test_a_final_text_step_answers_again_past_the_end(emu: EmulatorServer, sdk: OpenAI) -> None:
    emu.state.chat.set_script("short", [{"text": "first"}, {"text": "last ({outputs})"}])
    messages: list[Any] = [{"role": "user", "content": "hello"}]
    texts = []
    for prompt in ("more", "and more", None):
        answer = (
            sdk.chat.completions.create(model="m", messages=messages).choices[0].message.content
        )
        texts.append(answer)
        messages += [{"role": "assistant", "content": answer}]
        if prompt:
            messages.append({"role": "user", "content": prompt})

    assert texts == ["first", "last ()", "last ()"]
    assert emu.state.chat.counts() == {"short": {0: 1, 1: 2}}


def test_scripts_are_chosen_by_the_first_user_message_only(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    chat = emu.state.chat
    chat.set_script("weather", [{"text": "weather script"}], match="weather")
    chat.set_script("billing", [{"text": "billing script"}], match="invoice")
    chat.set_script("fallback", [{"text": "fallback script"}])

    def chat_answer(messages: list[Any]) -> str | None:
        return sdk.chat.completions.create(model="m", messages=messages).choices[0].message.content

    assert chat_answer([{"role": "user", "content": "my invoice"}]) == "billing script"
    assert (
        chat_answer([{"role": "user", "content": [{"type": "text", "text": "the weather"}]}])
        == "weather script"
    )
    assert (
        chat_answer([{"role": "system", "content": "weather"}, {"role": "user", "content": "hi"}])
        == "fallback script"
    )
    later = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "fallback script"},
        {"role": "user", "content": "my invoice"},
    ]
    assert chat_answer(later) == "fallback script"  # the conversation began elsewhere
    assert sdk.responses.create(model="m", input="invoice").output_text == "billing script"
    by_instructions = sdk.responses.create(model="m", input="hi", instructions="invoice")
    assert by_instructions.output_text == "fallback script"  # instructions do not select
    chained = sdk.responses.create(model="m", input="the weather")
    follow = sdk.responses.create(model="m", input="my invoice", previous_response_id=chained.id)
    assert follow.output_text == "weather script"  # the chain's first user message selects

    chat.delete_script("fallback")
    assert chat_answer([{"role": "user", "content": "hi"}]) is None  # builtin: tool calls
    assert [c["script"] for c in _calls(emu)][-1] == "builtin"


def test_a_text_part_list_and_images_count_as_one_user_message(
    emu: EmulatorServer, sdk: OpenAI
) -> None:
    emu.state.chat.set_script("pics", [{"text": "seen"}], match="look")
    content: Any = [
        {"type": "text", "text": "please"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "look"},
    ]
    answer = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])
    assert answer.choices[0].message.content == "seen"


# --- Azure -----------------------------------------------------------------------------------------


def test_azure_deployment_chat_round_trip(emu: EmulatorServer, azure: AzureOpenAI) -> None:
    emu.state.chat.set_script("forecast", THREE_STEPS, match="forecast")

    completions = chat_loop(azure, "forecast", model="my-gpt4o-deployment")  # type: ignore[arg-type]

    assert completions[-1].choices[0].message.content == FORECAST
    assert {c.model for c in completions} == {"my-gpt4o-deployment"}
    calls = _calls(emu)
    assert {(c["surface"], c["deployment"]) for c in calls} == {
        ("azure-openai", "my-gpt4o-deployment")
    }
    assert {c["path"] for c in calls} == {
        "/openai/deployments/my-gpt4o-deployment/chat/completions"
    }
    assert emu.state.requests("/openai/deployments")[0].query == f"api-version={AZURE_VERSION}"


def test_azure_responses_round_trip_and_retrieve(emu: EmulatorServer, azure: AzureOpenAI) -> None:
    emu.state.chat.set_script("forecast", THREE_STEPS, match="forecast")

    responses = responses_loop(azure, "forecast", chained=True)  # type: ignore[arg-type]

    assert responses[-1].output_text == FORECAST
    again = azure.responses.retrieve(responses[-1].id)
    assert again.id == responses[-1].id and again.output_text == FORECAST
    assert {c["surface"] for c in _calls(emu)} == {"azure-openai"}
    assert {c["path"] for c in _calls(emu)} == {"/openai/responses"}


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_azure_v1_path_round_trip(emu: EmulatorServer, azure_v1: OpenAI, api: str) -> None:
    emu.state.chat.set_script("forecast", THREE_STEPS, match="forecast")

    if api == "chat":
        final = chat_loop(azure_v1, "forecast")[-1].choices[0].message.content
    else:
        replies = responses_loop(azure_v1, "forecast", chained=True)
        final = replies[-1].output_text
        assert azure_v1.responses.retrieve(replies[0].id).output[0].type == "function_call"

    assert final == FORECAST
    assert {c["surface"] for c in _calls(emu)} == {"azure-v1"}
    endpoint = "chat/completions" if api == "chat" else "responses"
    assert {c["path"] for c in _calls(emu)} == {f"/openai/v1/{endpoint}"}


def test_azure_credentials_and_api_version(emu: EmulatorServer) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    deployment = f"{emu.url}/openai/deployments/d/chat/completions"

    assert (
        httpx.post(
            deployment, params={"api-version": "v"}, headers={"api-key": "k"}, json=body
        ).status_code
        == 200
    )
    assert (
        httpx.post(deployment, params={"api-version": "v"}, headers=BEARER, json=body).status_code
        == 200
    )
    no_version = httpx.post(deployment, headers={"api-key": "k"}, json=body)
    assert no_version.status_code == 400
    assert no_version.json()["error"]["code"] == "MissingApiVersionParameter"
    assert httpx.post(deployment, params={"api-version": "v"}, json=body).status_code == 401
    v1 = f"{emu.url}/openai/v1/chat/completions"
    assert (
        httpx.post(v1, headers={"api-key": "k"}, json=body).status_code == 200
    )  # no version needed
    assert httpx.post(v1, json=body).status_code == 401
    assert [c["status"] for c in _calls(emu, refused=True)] == [400, 401, 401]


def test_a_set_api_key_is_enforced_on_every_surface() -> None:
    with running_emulator(api_key="secret") as server:
        good = OpenAI(api_key="secret", base_url=server.base_url, max_retries=0)
        assert good.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        ).id
        bad = OpenAI(api_key="wrong", base_url=server.base_url, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.responses.create(model="m", input="x")
        azure_bad = AzureOpenAI(
            azure_endpoint=server.url, api_key="wrong", api_version="v", max_retries=0
        )
        with pytest.raises(openai.AuthenticationError):
            azure_bad.chat.completions.create(
                model="d", messages=[{"role": "user", "content": "x"}]
            )
        refused = server.state.chat.calls(refused=True)
        assert [(c["endpoint"], c["status"]) for c in refused] == [
            ("responses", 401),
            ("chat.completions", 401),
        ]


def test_no_beta_header_is_needed(emu: EmulatorServer) -> None:
    answer = httpx.post(
        f"{emu.base_url}/chat/completions",
        headers=BEARER,
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert answer.status_code == 200
    assert "openai-beta" not in emu.state.requests("/chat/completions")[0].headers


def test_responses_takes_hosted_tools_beside_functions(emu: EmulatorServer, sdk: OpenAI) -> None:
    """Tool search is how deferred functions are offered: a request naming it is valid."""
    deferred = {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {}},
        "defer_loading": True,
    }
    response = sdk.responses.create(
        model="m", input="hi", tools=[deferred, {"type": "tool_search"}]
    )
    assert response.status == "completed"
    assert [t.type for t in response.tools] == ["function", "tool_search"]
    assert _calls(emu, refused=True) == []
