"""The official clients of the run-shaped API against the emulator, over real HTTP.

``openai.OpenAI`` (``/v1``), ``openai.AzureOpenAI`` (``/openai``) and ``azure-ai-agents``'
``AgentsClient`` (``/api/projects/{project}``) each retrieve, list, submit to and cancel
runs, parsing every answer with their own models: proof that the wire is true.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from azure.ai.agents import AgentsClient
from azure.ai.agents.models import (
    AgentThread,
    RequiredFunctionToolCall,
    SubmitToolOutputsAction,
    ThreadRun,
)
from azure.core.credentials import AccessToken
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
)
from openai import AzureOpenAI, OpenAI
from openai.types.beta.threads import Run

from emulator import EmulatorServer
from emulator.testing import TEST_API_KEY

# The openai SDK marks the whole Assistants API deprecated; the emulator serves it anyway.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

AZURE_VERSION = "2024-07-01-preview"
#: Per-request option every AgentsClient call needs: azure-core refuses bearer over http.
PLAIN_HTTP: dict[str, Any] = {"enforce_https": False}


class FakeCredential:
    """An Entra credential stand-in: azure-core only calls ``get_token``."""

    def __init__(self, token: str = "entra-token") -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


@pytest.fixture
def oai(emu: EmulatorServer) -> Iterator[OpenAI]:
    client = OpenAI(api_key=TEST_API_KEY, base_url=emu.base_url, max_retries=0, timeout=5.0)
    yield client
    client.close()


@pytest.fixture
def azure_oai(emu: EmulatorServer) -> Iterator[AzureOpenAI]:
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
def credential() -> FakeCredential:
    return FakeCredential()


@pytest.fixture
def agents(emu: EmulatorServer, credential: FakeCredential) -> Iterator[AgentsClient]:
    client = AgentsClient(
        endpoint=f"{emu.url}/api/projects/proj", credential=credential, retry_total=0
    )
    yield client
    client.close()


def _two_phase_run(emu: EmulatorServer, thread_id: str = "thread_1", run_id: str = "run_1") -> None:
    emu.state.create_run(
        [
            [
                {"name": "get_customer", "arguments": {"customer_id": "42"}, "id": "call_a"},
                {"name": "add", "arguments": '{"a": 1, "b": 2}', "id": "call_b"},
            ],
            [{"name": "send_mail", "arguments": {"to": "x@example.com"}, "id": "call_c"}],
        ],
        thread_id=thread_id,
        run_id=run_id,
        metadata={"tenant": "t1"},
    )


def _outputs(*ids: str) -> list[dict[str, str]]:
    return [{"tool_call_id": call_id, "output": f"out-{call_id}"} for call_id in ids]


def _message(error: openai.APIStatusError) -> str:
    """The error JSON's ``message`` (the exception's own message adds "Error code: 400 - ")."""
    assert isinstance(error.body, dict)
    return str(error.body["message"])


# --- strictness helpers ---------------------------------------------------------------------


def _assert_azure_strict(model: Any, data: dict[str, Any], optional: frozenset[str]) -> None:
    """Every field the azure model documents as required is present, and each deserializes."""
    fields = type(model)._attr_to_rest_field
    missing = {f._rest_name for f in fields.values()} - set(data) - optional
    assert not missing, f"{type(model).__name__} lacks {sorted(missing)}"
    for attr in fields:
        getattr(model, attr)  # raises if the value does not deserialize to the field's type


def _raw_runs(emu: EmulatorServer, thread_id: str) -> list[dict[str, Any]]:
    headers = {"Authorization": "Bearer t", "OpenAI-Beta": "assistants=v2"}
    page = httpx.get(f"{emu.base_url}/threads/{thread_id}/runs", headers=headers).json()
    return list(page["data"])


# --- OpenAI ---------------------------------------------------------------------------------


def test_openai_retrieve_parses_run_and_required_action(emu: EmulatorServer, oai: OpenAI) -> None:
    _two_phase_run(emu)

    run = oai.beta.threads.runs.retrieve("run_1", thread_id="thread_1")

    assert isinstance(run, Run)
    assert (run.id, run.thread_id, run.status, run.object) == (
        "run_1",
        "thread_1",
        "requires_action",
        "thread.run",
    )
    assert run.required_action is not None
    calls = run.required_action.submit_tool_outputs.tool_calls
    assert [(c.id, c.type, c.function.name) for c in calls] == [
        ("call_a", "function", "get_customer"),
        ("call_b", "function", "add"),
    ]
    assert calls[0].function.arguments == '{"customer_id": "42"}'  # a JSON value, dumped
    assert calls[1].function.arguments == '{"a": 1, "b": 2}'  # a string, verbatim
    assert run.expires_at == run.created_at + 600
    assert run.metadata == {"tenant": "t1"}
    assert [t.function.name for t in run.tools if t.type == "function"] == [
        "get_customer",
        "add",
        "send_mail",
    ]


def test_every_status_validates_strictly_against_both_sdks(emu: EmulatorServer) -> None:
    """The SDKs parse leniently; strict validation proves no required field is missing."""
    # A queued run starts its turn after half the turn: a long turn keeps each status put
    # while the test reads it, however slow the machine (0.2 s was missed on a slow one).
    emu.state.turn_duration = 60.0
    _two_phase_run(emu, run_id="run_waiting")
    for status in ("queued", "in_progress", "completed", "failed", "cancelled", "expired"):
        emu.state.create_run([[{"name": "f"}]], thread_id="thread_1", run_id=status, status=status)

    raws = _raw_runs(emu, "thread_1")

    assert {r["status"] for r in raws} == {
        "requires_action",
        "queued",
        "in_progress",
        "completed",
        "failed",
        "cancelled",
        "expired",
    }
    for raw in raws:
        Run.model_validate(raw)  # raises on any missing or mistyped field
        azure = ThreadRun(raw)
        _assert_azure_strict(azure, raw, frozenset({"tool_resources"}))
        assert isinstance(azure.created_at, datetime.datetime)
    failed = next(r for r in raws if r["status"] == "failed")
    assert Run.model_validate(failed).last_error is not None


def test_openai_submit_and_poll_walks_the_phases(emu: EmulatorServer, oai: OpenAI) -> None:
    _two_phase_run(emu)

    queued = oai.beta.threads.runs.submit_tool_outputs(
        "run_1", thread_id="thread_1", tool_outputs=_outputs("call_a", "call_b")
    )
    assert isinstance(queued, Run)
    assert queued.status == "queued"
    assert queued.required_action is None

    start = time.monotonic()
    second = oai.beta.threads.runs.poll("run_1", thread_id="thread_1")
    assert second.status == "requires_action"
    assert second.required_action is not None
    assert [c.id for c in second.required_action.submit_tool_outputs.tool_calls] == ["call_c"]

    done = oai.beta.threads.runs.submit_tool_outputs_and_poll(
        run_id="run_1", thread_id="thread_1", tool_outputs=_outputs("call_c")
    )
    elapsed = time.monotonic() - start

    assert done.status == "completed"
    assert done.completed_at is not None
    assert done.usage is not None
    assert done.expires_at is None  # a finished run no longer expires
    assert elapsed < 1.5  # slept by openai-poll-after-ms, not the SDK's default 1 s
    submits = emu.state.submits(thread_id="thread_1")
    assert [(s["phase"], s["flavour"], s["lost"]) for s in submits] == [
        (0, "openai", False),
        (1, "openai", False),
    ]
    assert submits[0]["tool_outputs"] == _outputs("call_a", "call_b")
    assert submits[0]["headers"]["authorization"] == "Bearer <redacted>"
    assert submits[0]["headers"]["openai-beta"] == "assistants=v2"


def test_openai_lists_runs_by_has_more(emu: EmulatorServer, oai: OpenAI) -> None:
    created = [
        emu.state.create_run([[{"name": "f"}]], thread_id="thread_many")["id"] for _ in range(25)
    ]

    newest_first = [r.id for r in oai.beta.threads.runs.list(thread_id="thread_many", limit=10)]
    oldest_first = [
        r.id for r in oai.beta.threads.runs.list(thread_id="thread_many", limit=10, order="asc")
    ]

    assert newest_first == created[::-1]
    assert oldest_first == created
    assert len(emu.state.requests("/threads/thread_many/runs", "GET")) == 6  # 3 pages each
    page = oai.beta.threads.runs.list(thread_id="thread_many", limit=5, before=created[10])
    assert [r.id for r in page.data] == created[11:16][::-1]


def test_openai_cancel_and_errors_raise_the_sdks_own_exceptions(
    emu: EmulatorServer, oai: OpenAI
) -> None:
    _two_phase_run(emu)

    cancelled = oai.beta.threads.runs.cancel("run_1", thread_id="thread_1")

    assert cancelled.status == "cancelled"
    assert cancelled.cancelled_at is not None
    with pytest.raises(openai.BadRequestError) as again:
        oai.beta.threads.runs.cancel("run_1", thread_id="thread_1")
    assert _message(again.value) == "Cannot cancel run with status 'cancelled'."
    assert again.value.code == "invalid_run_state"
    with pytest.raises(openai.BadRequestError) as late:
        oai.beta.threads.runs.submit_tool_outputs(
            "run_1", thread_id="thread_1", tool_outputs=_outputs("call_a", "call_b")
        )
    assert _message(late.value) == 'Runs in status "cancelled" do not accept tool outputs.'
    with pytest.raises(openai.NotFoundError) as missing:
        oai.beta.threads.runs.retrieve("run_nope", thread_id="thread_1")
    assert missing.value.code == "not_found"
    with pytest.raises(openai.BadRequestError) as beta:
        oai.beta.threads.runs.retrieve(
            "run_1", thread_id="thread_1", extra_headers={"OpenAI-Beta": "agents=v1"}
        )
    assert beta.value.code == "missing_beta_header"


def test_openai_submit_missing_an_output_applies_nothing(emu: EmulatorServer, oai: OpenAI) -> None:
    _two_phase_run(emu)

    with pytest.raises(openai.BadRequestError) as partial:
        oai.beta.threads.runs.submit_tool_outputs(
            "run_1", thread_id="thread_1", tool_outputs=_outputs("call_a")
        )

    assert partial.value.code == "missing_tool_outputs"
    assert "'call_b'" in _message(partial.value)
    assert emu.state.submits() == []
    assert emu.state.run("thread_1", "run_1")["status"] == "requires_action"


# --- Azure OpenAI ---------------------------------------------------------------------------


def test_azure_openai_retrieve_list_submit_cancel(
    emu: EmulatorServer, azure_oai: AzureOpenAI
) -> None:
    _two_phase_run(emu)
    emu.state.create_run([[{"name": "f"}]], thread_id="thread_1", run_id="run_2")

    run = azure_oai.beta.threads.runs.retrieve("run_1", thread_id="thread_1")
    listed = [r.id for r in azure_oai.beta.threads.runs.list(thread_id="thread_1", limit=1)]
    queued = azure_oai.beta.threads.runs.submit_tool_outputs(
        "run_1", thread_id="thread_1", tool_outputs=_outputs("call_a", "call_b")
    )
    second = azure_oai.beta.threads.runs.poll("run_1", thread_id="thread_1")
    done = azure_oai.beta.threads.runs.submit_tool_outputs_and_poll(
        run_id="run_1", thread_id="thread_1", tool_outputs=_outputs("call_c")
    )
    cancelled = azure_oai.beta.threads.runs.cancel("run_2", thread_id="thread_1")

    assert run.status == "requires_action"
    assert listed == ["run_2", "run_1"]
    assert (queued.status, second.status, done.status) == ("queued", "requires_action", "completed")
    assert cancelled.status == "cancelled"
    requests = emu.state.requests("/openai/threads/")
    assert requests
    for record in requests:
        assert record.path.startswith("/openai/threads/")  # no /deployments/ prefix
        assert f"api-version={AZURE_VERSION}" in record.query
        assert record.headers["api-key"] == "<redacted>"
    assert {s["flavour"] for s in emu.state.submits()} == {"azure-openai"}


def test_azure_openai_with_a_deployment_and_an_ad_token(emu: EmulatorServer) -> None:
    """``azure_deployment`` never prefixes threads paths; an AD token travels as Bearer."""
    _two_phase_run(emu)
    client = AzureOpenAI(
        azure_endpoint=emu.url,
        azure_deployment="gpt-4o",
        azure_ad_token="ad-token",
        api_version=AZURE_VERSION,
        max_retries=0,
    )

    run = client.beta.threads.runs.retrieve("run_1", thread_id="thread_1")

    assert run.id == "run_1"
    (record,) = emu.state.requests("/runs/run_1")
    assert record.path == "/openai/threads/thread_1/runs/run_1"
    assert record.headers["authorization"] == "Bearer <redacted>"
    client.close()


def test_azure_openai_errors(emu: EmulatorServer, azure_oai: AzureOpenAI) -> None:
    _two_phase_run(emu)
    emu.state.expire_run("thread_1", "run_1")

    with pytest.raises(openai.BadRequestError) as expired:
        azure_oai.beta.threads.runs.submit_tool_outputs(
            "run_1", thread_id="thread_1", tool_outputs=_outputs("call_a", "call_b")
        )
    with pytest.raises(openai.NotFoundError):
        azure_oai.beta.threads.runs.list(thread_id="thread_nope")

    assert _message(expired.value) == 'Runs in status "expired" do not accept tool outputs.'


# --- Azure AI Foundry Agent Service ---------------------------------------------------------


def test_foundry_get_parses_thread_run(
    emu: EmulatorServer, agents: AgentsClient, credential: FakeCredential
) -> None:
    _two_phase_run(emu)

    run = agents.runs.get("thread_1", "run_1", **PLAIN_HTTP)

    assert isinstance(run, ThreadRun)
    assert (run.id, run.thread_id, run.status) == ("run_1", "thread_1", "requires_action")
    assert run.agent_id == "asst_emulated"
    assert isinstance(run.created_at, datetime.datetime)
    assert run.expires_at - run.created_at == datetime.timedelta(seconds=600)
    assert run.completed_at is None
    action = run.required_action
    assert isinstance(action, SubmitToolOutputsAction)
    calls = action.submit_tool_outputs.tool_calls
    assert all(isinstance(c, RequiredFunctionToolCall) for c in calls)
    assert [(c.id, c.function.name) for c in calls] == [
        ("call_a", "get_customer"),
        ("call_b", "add"),
    ]
    assert credential.scopes == [("https://ai.azure.com/.default",)]
    (record,) = emu.state.requests("/api/projects/proj/threads/thread_1/runs/run_1")
    assert record.query == "api-version=v1"
    assert record.headers["authorization"] == "Bearer <redacted>"


def test_foundry_submit_walks_the_phases_and_cancel(
    emu: EmulatorServer, agents: AgentsClient
) -> None:
    _two_phase_run(emu)
    emu.state.create_run([[{"name": "f"}]], thread_id="thread_1", run_id="run_2")

    queued = agents.runs.submit_tool_outputs(
        "thread_1", "run_1", tool_outputs=_outputs("call_a", "call_b"), **PLAIN_HTTP
    )
    time.sleep(emu.state.turn_duration + 0.05)
    second = agents.runs.get("thread_1", "run_1", **PLAIN_HTTP)
    agents.runs.submit_tool_outputs(
        "thread_1", "run_1", tool_outputs=_outputs("call_c"), **PLAIN_HTTP
    )
    time.sleep(emu.state.turn_duration + 0.05)
    done = agents.runs.get("thread_1", "run_1", **PLAIN_HTTP)
    cancelled = agents.runs.cancel("thread_1", "run_2", **PLAIN_HTTP)

    assert queued.status == "queued"
    assert second.status == "requires_action"
    assert isinstance(second.required_action, SubmitToolOutputsAction)
    assert [c.id for c in second.required_action.submit_tool_outputs.tool_calls] == ["call_c"]
    assert done.status == "completed"
    assert isinstance(done.completed_at, datetime.datetime)
    assert cancelled.status == "cancelled"
    assert isinstance(cancelled.cancelled_at, datetime.datetime)
    assert [(s["phase"], s["flavour"]) for s in emu.state.submits()] == [
        (0, "foundry"),
        (1, "foundry"),
    ]


def test_foundry_lists_runs_by_last_id_over_several_pages(
    emu: EmulatorServer, agents: AgentsClient
) -> None:
    created = [
        emu.state.create_run([[{"name": "f"}]], thread_id="thread_many")["id"] for _ in range(25)
    ]

    listed = [r.id for r in agents.runs.list("thread_many", limit=10, **PLAIN_HTTP)]
    ascending = [r.id for r in agents.runs.list("thread_many", order="asc", **PLAIN_HTTP)]

    assert listed == created[::-1]
    assert ascending == created
    pages = emu.state.requests("/threads/thread_many/runs", "GET")
    # 10 + 10 + 5, then 20 + 5: the last page's last_id is null, so no empty page follows.
    assert len(pages) == 5
    assert "after=" in pages[1].query


def test_foundry_lists_threads_most_recent_first(emu: EmulatorServer, agents: AgentsClient) -> None:
    threads = [f"thread_{i:02d}" for i in range(23)]
    for thread_id in threads:
        emu.state.create_run([[{"name": "f"}]], thread_id=thread_id)

    listed = list(agents.threads.list(limit=10, **PLAIN_HTTP))
    ascending = [t.id for t in agents.threads.list(limit=10, order="asc", **PLAIN_HTTP)]

    assert [t.id for t in listed] == threads[::-1]
    assert ascending == threads
    assert len(emu.state.requests("/api/projects/proj/threads", "GET")) == 6  # 3 pages each
    for thread in listed:
        assert isinstance(thread, AgentThread)
        assert isinstance(thread.created_at, datetime.datetime)
        _assert_azure_strict(thread, dict(thread), frozenset())


def test_foundry_errors_parse_into_http_response_errors(
    emu: EmulatorServer, agents: AgentsClient
) -> None:
    _two_phase_run(emu)

    with pytest.raises(HttpResponseError) as partial:
        agents.runs.submit_tool_outputs(
            "thread_1", "run_1", tool_outputs=_outputs("call_a"), **PLAIN_HTTP
        )
    with pytest.raises(ResourceNotFoundError) as missing:
        agents.runs.get("thread_1", "run_nope", **PLAIN_HTTP)
    anonymous = AgentsClient(
        endpoint=f"{emu.url}/api/projects/proj",
        credential=FakeCredential(""),
        retry_total=0,
    )
    with pytest.raises(ClientAuthenticationError):
        anonymous.runs.get("thread_1", "run_1", **PLAIN_HTTP)

    assert partial.value.status_code == 400
    assert partial.value.error is not None
    assert partial.value.error.code == "missing_tool_outputs"
    assert "'call_b'" in str(partial.value.error.message)
    assert missing.value.status_code == 404
    anonymous.close()


# --- one store, three flavours --------------------------------------------------------------


def test_a_run_is_one_run_through_all_three_flavours(
    emu: EmulatorServer, oai: OpenAI, azure_oai: AzureOpenAI, agents: AgentsClient
) -> None:
    _two_phase_run(emu)

    oai.beta.threads.runs.submit_tool_outputs(
        "run_1", thread_id="thread_1", tool_outputs=_outputs("call_a", "call_b")
    )
    via_azure = azure_oai.beta.threads.runs.poll("run_1", thread_id="thread_1")
    via_foundry = agents.runs.submit_tool_outputs(
        "thread_1", "run_1", tool_outputs=_outputs("call_c"), **PLAIN_HTTP
    )

    assert via_azure.status == "requires_action"
    assert via_foundry.status == "queued"
    assert [s["flavour"] for s in emu.state.submits()] == ["openai", "foundry"]


HOSTILE_IDS = [
    "a/b",
    "50%",
    "%2F",
    "}{",
    "{run_id}",
    "line\nbreak",
    "emoji 🙂 ✓",
    "?q=1#f",
    "+ &=;",
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS, ids=ascii)
def test_any_character_ids_through_every_sdk(
    emu: EmulatorServer,
    oai: OpenAI,
    azure_oai: AzureOpenAI,
    agents: AgentsClient,
    hostile: str,
) -> None:
    thread_id, run_id = f"thread {hostile}", f"run {hostile}"
    emu.state.create_run(
        [[{"name": "f", "id": f"call {hostile}"}], [{"name": "g", "id": "call_2"}]],
        thread_id=thread_id,
        run_id=run_id,
    )

    assert oai.beta.threads.runs.retrieve(run_id, thread_id=thread_id).id == run_id
    assert azure_oai.beta.threads.runs.retrieve(run_id, thread_id=thread_id).id == run_id
    assert agents.runs.get(thread_id, run_id, **PLAIN_HTTP).thread_id == thread_id
    assert [r.id for r in agents.runs.list(thread_id, **PLAIN_HTTP)] == [run_id]
    queued = agents.runs.submit_tool_outputs(
        thread_id,
        run_id,
        tool_outputs=[{"tool_call_id": f"call {hostile}", "output": hostile}],
        **PLAIN_HTTP,
    )

    assert queued.status == "queued"
    (submit,) = emu.state.submits(thread_id=thread_id, run_id=run_id)
    assert submit["tool_outputs"] == [{"tool_call_id": f"call {hostile}", "output": hostile}]
