"""Calling the model, with the official ``openai`` SDK and the variables toolfan already reads.

=================  ==================================================================
service            variables (``TOOLFAN_MODEL_API`` picks one; else the first one set)
=================  ==================================================================
Azure AI Foundry   ``AZURE_AI_PROJECT_ENDPOINT``, ``AZURE_AI_AGENTS_TOKEN`` or an Entra
                   token (the ``azure`` extra); the project's ``/openai/v1``
Azure OpenAI       ``AZURE_OPENAI_ENDPOINT``, ``AZURE_OPENAI_API_KEY`` (or
                   ``AZURE_OPENAI_AD_TOKEN``), ``OPENAI_API_VERSION``; the SDK's
                   ``AzureOpenAI`` client (the model is the deployment name)
OpenAI             ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``
=================  ==================================================================

The SDK's own retries are off: a failed call is retried by the step's Celery task, which
keeps the step's lease honest and its retries counted (``TOOLFAN_MODEL_RETRIES``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import openai

from dispatcher.sources.assistants_config import FOUNDRY_SCOPE, EntraToken
from dispatcher.sources.inline_calls import Api
from tasks.settings import get_settings

#: The Azure OpenAI API version when ``OPENAI_API_VERSION`` is unset: the first that serves
#: Responses as well as Chat Completions.
AZURE_API_VERSION = "2025-04-01-preview"
#: Statuses worth another try: the service was busy or briefly broken.
_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class ModelError(Exception):
    """A model call failed.

    Attributes:
        retryable: Whether the same call may succeed later.
    """

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def _value(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def make_client(env: Mapping[str, str] | None = None) -> openai.OpenAI:
    """The SDK client the environment describes.

    Raises:
        ModelError: no credential, or ``TOOLFAN_MODEL_API`` names no service.
    """
    env = os.environ if env is None else env
    service = _value(env, "TOOLFAN_MODEL_API").lower() or _service(env)
    timeout = get_settings().model_timeout
    if service == "foundry":
        endpoint = _value(env, "AZURE_AI_PROJECT_ENDPOINT").rstrip("/")
        token = _value(env, "AZURE_AI_AGENTS_TOKEN")
        key: Any = token or EntraToken(FOUNDRY_SCOPE)
        return openai.OpenAI(
            base_url=f"{endpoint}/openai/v1", api_key=key, timeout=timeout, max_retries=0
        )
    if service == "azure-openai":
        return _azure_openai(env, timeout)
    if service != "openai":
        raise ModelError(
            f"TOOLFAN_MODEL_API={service!r} is not one of openai, azure-openai, foundry",
            retryable=False,
        )
    if not _value(env, "OPENAI_API_KEY"):
        raise ModelError("set OPENAI_API_KEY to call the model", retryable=False)
    base = _value(env, "OPENAI_BASE_URL") or None
    return openai.OpenAI(
        api_key=_value(env, "OPENAI_API_KEY"), base_url=base, timeout=timeout, max_retries=0
    )


def _azure_openai(env: Mapping[str, str], timeout: float) -> openai.OpenAI:
    """The SDK's own Azure client: ``/openai/deployments/{model}/...?api-version=``."""
    key, token = _value(env, "AZURE_OPENAI_API_KEY"), _value(env, "AZURE_OPENAI_AD_TOKEN")
    if not key and not token:
        raise ModelError("set AZURE_OPENAI_API_KEY (or AZURE_OPENAI_AD_TOKEN)", retryable=False)
    return openai.AzureOpenAI(
        azure_endpoint=_value(env, "AZURE_OPENAI_ENDPOINT").rstrip("/"),
        api_key=key or None,
        azure_ad_token=None if key else token,
        api_version=_value(env, "OPENAI_API_VERSION") or AZURE_API_VERSION,
        timeout=timeout,
        max_retries=0,
    )


def _service(env: Mapping[str, str]) -> str:
    if _value(env, "AZURE_AI_PROJECT_ENDPOINT"):
        return "foundry"
    if _value(env, "AZURE_OPENAI_ENDPOINT"):
        return "azure-openai"
    return "openai"


@cache
def get_client() -> openai.OpenAI:
    """The model client of this process, made on first use."""
    return make_client()


def call_model(
    api: Api,
    model: str,
    history: Sequence[Any],
    instructions: str | None,
    tools: Sequence[Mapping[str, Any]],
    client: openai.OpenAI | None = None,
) -> dict[str, Any]:
    """One model answer, as saved: Chat's assistant message, or Responses' output items.

    Raises:
        ModelError: the call failed (``retryable`` says whether to try again).
    """
    sdk = client if client is not None else get_client()
    try:
        if api is Api.CHAT:
            return _chat(sdk, model, history, instructions, tools)
        return _responses(sdk, model, history, instructions, tools)
    except openai.APIStatusError as exc:
        retry = exc.status_code in _RETRYABLE_STATUS
        raise ModelError(
            f"the model API answered {exc.status_code}: {_message(exc)}", retryable=retry
        ) from exc
    except openai.APIConnectionError as exc:
        raise ModelError(f"the model API could not be reached: {exc}", retryable=True) from exc
    except openai.OpenAIError as exc:
        raise ModelError(f"the model call failed: {exc}", retryable=False) from exc


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return str(body["message"])[:1000]
    return str(exc.message)[:1000]


def _chat(
    client: openai.OpenAI,
    model: str,
    history: Sequence[Any],
    instructions: str | None,
    tools: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    messages: list[Any] = [{"role": "system", "content": instructions}] if instructions else []
    options: dict[str, Any] = {"tools": list(tools), "parallel_tool_calls": True} if tools else {}
    completion = client.chat.completions.create(
        model=model, messages=[*messages, *history], **options
    )
    if not completion.choices:
        raise ModelError("the model answered with no choices", retryable=True)
    choice = completion.choices[0]
    message: dict[str, Any] = {"role": "assistant", "content": choice.message.content}
    calls = [
        c.model_dump(mode="json", by_alias=True, exclude_none=True)
        for c in choice.message.tool_calls or []
    ]
    if calls:
        message["tool_calls"] = calls
    return {"id": completion.id, "finish_reason": choice.finish_reason, "message": message}


def _responses(
    client: openai.OpenAI,
    model: str,
    history: Sequence[Any],
    instructions: str | None,
    tools: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    options: dict[str, Any] = {"tools": list(tools)} if tools else {}
    if instructions:
        options["instructions"] = instructions
    response = client.responses.create(model=model, input=list(history), **options)
    if response.status not in (None, "completed"):
        detail = response.error.message if response.error else response.status
        raise ModelError(f"the response ended {response.status}: {detail}", retryable=False)
    output = [
        item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in response.output
    ]
    return {
        "id": response.id,
        "status": response.status,
        "output": output,
        "text": response.output_text,
    }
