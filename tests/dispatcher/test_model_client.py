"""The tool loop's model client: each service's variables reach the emulator's model.

Real HTTP, the official SDK: an OpenAI client from ``OPENAI_*``, the SDK's Azure client
from ``AZURE_OPENAI_*`` (deployment paths, ``api-key``), and Foundry's ``/openai/v1``
under the project endpoint. Model errors come back classified for the step's retries.
"""

from __future__ import annotations

import openai
import pytest

from dispatcher.conversations.model import ModelError, call_model, make_client
from dispatcher.sources.inline_calls import Api
from emulator.testing import TEST_API_KEY

HELLO = [{"role": "user", "content": "hello"}]


def test_openai_variables_reach_the_model(emulator, api):
    client = make_client({"OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": emulator.base_url})
    for api in Api:
        answer = call_model(api, "m", HELLO, "be brief", [], client)
        assert answer["id"]
    assert emulator.state.chat.calls(refused=True) == []


def test_azure_openai_variables_use_the_sdk_azure_client(emulator, api):
    env = {"AZURE_OPENAI_ENDPOINT": emulator.url, "AZURE_OPENAI_API_KEY": "azure-key"}
    client = make_client(env)
    assert isinstance(client, openai.AzureOpenAI)
    for api in Api:
        call_model(api, "my-deployment", HELLO, None, [], client)
    calls = emulator.state.chat.calls()[-2:]
    assert [c["surface"] for c in calls] == ["azure-openai", "azure-openai"]
    assert calls[0]["deployment"] == "my-deployment"
    assert emulator.state.chat.calls(refused=True) == []


def test_foundry_goes_to_the_projects_openai_v1_with_its_token():
    env = {
        "AZURE_AI_PROJECT_ENDPOINT": "https://res.services.ai.azure.com/api/projects/p/",
        "AZURE_AI_AGENTS_TOKEN": "tok",
    }
    client = make_client(env)
    assert str(client.base_url) == "https://res.services.ai.azure.com/api/projects/p/openai/v1/"
    assert client.api_key == "tok"


def test_missing_credentials_and_unknown_services_are_named():
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        make_client({})
    with pytest.raises(ModelError, match="AZURE_OPENAI_API_KEY"):
        make_client({"AZURE_OPENAI_ENDPOINT": "https://x.openai.azure.com"})
    with pytest.raises(ModelError, match="TOOLFAN_MODEL_API"):
        make_client({"TOOLFAN_MODEL_API": "bard"})


def test_errors_are_classified_for_the_retries(emulator, api):
    client = make_client({"OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": emulator.base_url})
    emulator.state.chat.set_faults(fail_next=1, status=503)
    with pytest.raises(ModelError, match="503") as busy:
        call_model(Api.CHAT, "m", HELLO, None, [], client)
    assert busy.value.retryable
    with pytest.raises(ModelError, match="400") as refused:
        call_model(
            Api.CHAT,
            "m",
            [{"role": "tool", "content": "x", "tool_call_id": "nope"}],
            None,
            [],
            client,
        )
    assert not refused.value.retryable
    dead = make_client({"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    with pytest.raises(ModelError, match="could not be reached") as unreachable:
        call_model(Api.RESPONSES, "m", HELLO, None, [], dead)
    assert unreachable.value.retryable
