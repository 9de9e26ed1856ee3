"""The assistants source's pure parts: flavours, outputs, batch ids, and hostile runs."""

from __future__ import annotations

import json

import pytest

from dispatcher.errors import AuthenticationError, EndpointError
from dispatcher.sources.assistants import batch_id, phase_of, run_of
from dispatcher.sources.assistants_config import Flavour, flavour_of, load_config
from dispatcher.sources.assistants_models import parse_run, poll_after
from dispatcher.sources.outputs import output_text


def test_the_flavour_follows_the_documented_precedence():
    foundry = {"AZURE_AI_PROJECT_ENDPOINT": "https://x.services.ai.azure.com/api/projects/p"}
    azure = {"AZURE_OPENAI_ENDPOINT": "https://x.openai.azure.com"}
    assert flavour_of({}) is Flavour.OPENAI
    assert flavour_of(azure) is Flavour.AZURE_OPENAI
    assert flavour_of({**azure, **foundry}) is Flavour.FOUNDRY
    assert flavour_of({**foundry, "TOOLFAN_ASSISTANTS_API": "azure-openai"}) is Flavour.AZURE_OPENAI
    with pytest.raises(EndpointError, match="TOOLFAN_ASSISTANTS_API"):
        flavour_of({"TOOLFAN_ASSISTANTS_API": "bedrock"})


def test_each_flavour_builds_its_own_url_credential_and_version():
    openai = load_config({"OPENAI_API_KEY": "sk-1"})
    assert openai.base_url == "https://api.openai.com/v1"
    assert openai.headers["OpenAI-Beta"] == "assistants=v2" and not openai.params
    azure = load_config(
        {"AZURE_OPENAI_ENDPOINT": "https://r.openai.azure.com/", "AZURE_OPENAI_API_KEY": "k"}
    )
    assert azure.base_url == "https://r.openai.azure.com/openai"
    assert azure.headers["api-key"] == "k" and azure.params == {"api-version": "2024-07-01-preview"}
    ad = load_config(
        {
            "AZURE_OPENAI_ENDPOINT": "https://r",
            "AZURE_OPENAI_AD_TOKEN": "t",
            "OPENAI_API_VERSION": "v9",
        }
    )
    assert ad.headers["Authorization"] == "Bearer t" and ad.params == {"api-version": "v9"}
    foundry = load_config(
        {"AZURE_AI_PROJECT_ENDPOINT": "https://f/api/projects/p", "AZURE_AI_AGENTS_TOKEN": "e"}
    )
    assert (
        foundry.params == {"api-version": "v1"} and foundry.headers["Authorization"] == "Bearer e"
    )
    assert "OpenAI-Beta" not in foundry.headers and foundry.lists_threads


def test_a_missing_credential_or_endpoint_names_the_variable():
    with pytest.raises(AuthenticationError) as no_key:
        load_config({})
    assert no_key.value.setting == "OPENAI_API_KEY"
    with pytest.raises(AuthenticationError) as no_azure_key:
        load_config({"AZURE_OPENAI_ENDPOINT": "https://r"})
    assert no_azure_key.value.setting == "AZURE_OPENAI_API_KEY"
    with pytest.raises(EndpointError) as bad:
        load_config({"AZURE_OPENAI_ENDPOINT": "r.openai.azure.com", "AZURE_OPENAI_API_KEY": "k"})
    assert bad.value.setting == "AZURE_OPENAI_ENDPOINT"


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"AZURE_OPENAI_ENDPOINT": "https://r:abc", "AZURE_OPENAI_API_KEY": "k"}, "AZURE_OPENAI"),
        ({"AZURE_AI_PROJECT_ENDPOINT": "https://r:99999/api/projects/p"}, "AZURE_AI_PROJECT"),
        ({"OPENAI_BASE_URL": "http://h:abc/v1", "OPENAI_API_KEY": "k"}, "OPENAI_BASE_URL"),
        ({"OPENAI_BASE_URL": "api.example.com/v1", "OPENAI_API_KEY": "k"}, "OPENAI_BASE_URL"),
    ],
)
def test_an_endpoint_with_an_unreadable_port_or_no_scheme_names_its_variable(env, setting):
    # An unreadable port passed the old check (it looked at the scheme only) and ended the
    # start in httpx's InvalidURL traceback; the runs source took any OPENAI_BASE_URL.
    with pytest.raises(EndpointError) as bad:
        load_config(env)
    assert bad.value.setting.startswith(setting)


def test_outputs_are_strings_and_failures_are_json_errors():
    assert output_text({"success": True, "output": "5"}) == "5"
    parts = [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "u"}]
    assert output_text({"success": True, "output": parts}) == "a\n[image]"
    assert json.loads(output_text({"success": False, "error": "no"})) == {"error": "no"}


@pytest.mark.parametrize(
    ("thread", "run"), [("t", "r"), ("t/x", "r"), ("t", "x/r"), ('a", "b', "c"), ("\ud800", "r")]
)
def test_batch_ids_name_their_run_injectively(thread, run):
    assert run_of(batch_id(thread, run)) == (thread, run)
    assert batch_id("t/x", "r") != batch_id("t", "x/r")


def test_phases_are_named_by_their_calls_whatever_the_order():
    assert phase_of(["b", "a"]) == phase_of(["a", "b"]) != phase_of(["a"])


def test_a_hostile_run_is_read_without_raising():
    waiting = {
        "status": "requires_action",
        "expires_at": 10**400,
        "metadata": {"k": "v", "n": 5},
        "required_action": {
            "type": "submit_tool_outputs",
            "submit_tool_outputs": {
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": "{}"},
                    },
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": "{}"},
                    },
                    {"id": "c2", "type": "code_interpreter"},
                    "junk",
                    {"id": "", "function": {"name": "x"}},
                ]
            },
        },
    }
    run = parse_run(waiting, "t", "r")
    assert [c.call_id for c in run.tool_calls] == ["c1"]
    assert len(run.problems) == 4
    assert run.expires_at is None and run.metadata == {"k": "v"}
    assert parse_run({"status": "requires_action"}, "t", "r").problems


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("250", 0.25), (" 1000 ", 1.0), ("0", 0.0), ("999999999", 999999.999)],
)
def test_the_api_s_poll_after_is_read_as_whole_milliseconds(header, seconds):
    assert poll_after(header) == seconds


@pytest.mark.parametrize(
    "header",
    [None, "", " ", "-5", "+5", "1.5", "1e3", "nan", "inf", "250ms", "\u0661\u0662", "1" * 10],
)
def test_a_poll_after_that_is_not_a_count_of_milliseconds_asks_nothing(header):
    assert poll_after(header) is None


def test_an_entra_token_is_kept_until_near_its_expiry_then_fetched_again(monkeypatch):
    import time as clock

    from dispatcher.sources import assistants_config
    from dispatcher.sources.assistants_config import TOKEN_MARGIN, EntraToken

    issued = []

    class Credential:  # DefaultAzureCredential's one method toolfan calls
        def get_token(self, scope: str):
            issued.append(scope)
            expires = clock.time() + TOKEN_MARGIN + 60
            return type("AccessToken", (), {"token": f"tok{len(issued)}", "expires_on": expires})

    token = EntraToken(assistants_config.FOUNDRY_SCOPE)
    token._credential = Credential()
    assert token() == "tok1" and token() == "tok1"
    assert issued == ["https://ai.azure.com/.default"]
    now = clock.time()
    monkeypatch.setattr(assistants_config.time, "time", lambda: now + 61)
    assert token() == "tok2"


def test_foundry_without_a_token_or_azure_identity_names_the_variable(monkeypatch):
    import builtins

    from dispatcher.errors import AuthenticationError as NoToken
    from dispatcher.sources.assistants_config import EntraToken

    real_import = builtins.__import__

    def no_azure(name, *args, **kwargs):
        if name.startswith("azure.identity"):
            raise ImportError("no azure-identity")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_azure)
    with pytest.raises(NoToken, match="AZURE_AI_AGENTS_TOKEN") as refused:
        EntraToken("scope")()
    assert refused.value.setting == "AZURE_AI_AGENTS_TOKEN"
