"""Which Assistants-protocol service toolfan talks to, from the variables its SDKs use.

Three services serve the run-shaped protocol: OpenAI, Azure OpenAI and Azure AI Foundry
Agent Service. Each is configured the way its own SDK is, so an application that already
runs against one needs no new variables:

========================  ============================================================
flavour                   variables
========================  ============================================================
``openai``                ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``
``azure-openai``          ``AZURE_OPENAI_ENDPOINT``, ``AZURE_OPENAI_API_KEY`` (header
                          ``api-key``) or ``AZURE_OPENAI_AD_TOKEN`` (bearer),
                          ``OPENAI_API_VERSION`` (default ``2024-07-01-preview``)
``foundry``               ``AZURE_AI_PROJECT_ENDPOINT``, ``AZURE_AI_AGENTS_TOKEN`` or an
                          Entra token from ``azure-identity`` (the ``azure`` extra)
========================  ============================================================

``TOOLFAN_ASSISTANTS_API`` picks one explicitly; otherwise a Foundry endpoint wins, then an
Azure OpenAI endpoint, then OpenAI.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from dispatcher.errors import AuthenticationError, EndpointError

#: The Azure OpenAI API version when ``OPENAI_API_VERSION`` is unset (the Assistants guide's).
AZURE_API_VERSION = "2024-07-01-preview"
#: Foundry Agent Service's API version, and the scope of its Entra tokens.
FOUNDRY_API_VERSION = "v1"
FOUNDRY_SCOPE = "https://ai.azure.com/.default"
OPENAI_BASE_URL = "https://api.openai.com/v1"
#: Seconds before an Entra token's expiry at which it is fetched again.
TOKEN_MARGIN = 300.0


class Flavour(StrEnum):
    """The services that speak the Assistants protocol."""

    OPENAI = "openai"
    AZURE_OPENAI = "azure-openai"
    FOUNDRY = "foundry"


@dataclass(frozen=True)
class AssistantsConfig:
    """Where the runs are and how to authenticate.

    Attributes:
        flavour: Which service.
        base_url: The root the runs paths hang from (``.../threads/{id}/runs/{id}``).
        headers: Fixed headers of every request (version header, a static credential).
        params: Fixed query parameters of every request (``api-version``).
        bearer: Makes the bearer token of a request when it is not static (Entra).
        key_setting: The variable holding the credential, for error messages.
        url_setting: The variable holding the endpoint, for error messages.
        secrets: Credential values to scrub from any message.
    """

    flavour: Flavour
    base_url: str
    headers: Mapping[str, str]
    params: Mapping[str, str] = field(default_factory=dict)
    bearer: Callable[[], str] | None = None
    key_setting: str = "OPENAI_API_KEY"
    url_setting: str = "OPENAI_BASE_URL"
    secrets: tuple[str, ...] = ()

    @property
    def lists_threads(self) -> bool:
        """Whether the service lists threads (only Foundry does)."""
        return self.flavour is Flavour.FOUNDRY


def flavour_of(env: Mapping[str, str]) -> Flavour:
    """The flavour the environment names, by the documented precedence.

    Raises:
        EndpointError: ``TOOLFAN_ASSISTANTS_API`` names no flavour.
    """
    named = env.get("TOOLFAN_ASSISTANTS_API", "").strip().lower()
    if named:
        try:
            return Flavour(named)
        except ValueError:
            choices = ", ".join(f.value for f in Flavour)
            error = EndpointError(f"TOOLFAN_ASSISTANTS_API={named!r} is not one of {choices}")
            error.setting = "TOOLFAN_ASSISTANTS_API"
            raise error from None
    if env.get("AZURE_AI_PROJECT_ENDPOINT", "").strip():
        return Flavour.FOUNDRY
    if env.get("AZURE_OPENAI_ENDPOINT", "").strip():
        return Flavour.AZURE_OPENAI
    return Flavour.OPENAI


def load_config(env: Mapping[str, str] | None = None) -> AssistantsConfig:
    """The configuration the environment describes.

    Raises:
        AuthenticationError: the chosen flavour has no credential.
        EndpointError: it has no endpoint, or an unusable one.
    """
    env = os.environ if env is None else env
    flavour = flavour_of(env)
    if flavour is Flavour.AZURE_OPENAI:
        return _azure_openai(env)
    if flavour is Flavour.FOUNDRY:
        return _foundry(env)
    return _openai(env)


def _openai(env: Mapping[str, str]) -> AssistantsConfig:
    key = env.get("OPENAI_API_KEY", "").strip()
    base = _endpoint(env, "OPENAI_BASE_URL", OPENAI_BASE_URL)
    if not key:
        raise _no_key(f"no API key for {base}: set OPENAI_API_KEY", "OPENAI_API_KEY")
    return AssistantsConfig(
        Flavour.OPENAI,
        base.rstrip("/"),
        {"Authorization": f"Bearer {key}", "OpenAI-Beta": "assistants=v2"},
        secrets=(key,),
    )


def _azure_openai(env: Mapping[str, str]) -> AssistantsConfig:
    endpoint = _endpoint(env, "AZURE_OPENAI_ENDPOINT")
    version = env.get("OPENAI_API_VERSION", "").strip() or AZURE_API_VERSION
    key = env.get("AZURE_OPENAI_API_KEY", "").strip()
    token = env.get("AZURE_OPENAI_AD_TOKEN", "").strip()
    if key:
        auth = {"api-key": key}
    elif token:
        auth = {"Authorization": f"Bearer {token}"}
    else:
        raise _no_key(
            f"no credential for {endpoint}: set AZURE_OPENAI_API_KEY or AZURE_OPENAI_AD_TOKEN",
            "AZURE_OPENAI_API_KEY",
        )
    return AssistantsConfig(
        Flavour.AZURE_OPENAI,
        f"{endpoint}/openai",
        {**auth, "OpenAI-Beta": "assistants=v2"},
        {"api-version": version},
        key_setting="AZURE_OPENAI_API_KEY" if key else "AZURE_OPENAI_AD_TOKEN",
        url_setting="AZURE_OPENAI_ENDPOINT",
        secrets=tuple(s for s in (key, token) if s),
    )


def _foundry(env: Mapping[str, str]) -> AssistantsConfig:
    endpoint = _endpoint(env, "AZURE_AI_PROJECT_ENDPOINT")
    token = env.get("AZURE_AI_AGENTS_TOKEN", "").strip()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    bearer = None if token else EntraToken(FOUNDRY_SCOPE)
    return AssistantsConfig(
        Flavour.FOUNDRY,
        endpoint,
        headers,
        {"api-version": FOUNDRY_API_VERSION},
        bearer=bearer,
        key_setting="AZURE_AI_AGENTS_TOKEN",
        url_setting="AZURE_AI_PROJECT_ENDPOINT",
        secrets=(token,) if token else (),
    )


def _endpoint(env: Mapping[str, str], name: str, default: str = "") -> str:
    """The endpoint ``name`` gives (or ``default``), checked before any client uses it.

    Raises:
        EndpointError: not an http(s) URL with a host; an unreadable port, say, would
            otherwise end the start in httpx's traceback.
    """
    value = env.get(name, "").strip().rstrip("/") or default
    problem = None
    if not value.startswith(("http://", "https://")):
        problem = f"{name} must be an http(s) URL, got {value!r}"
    else:
        try:
            url = httpx.URL(value)
        except httpx.InvalidURL as exc:
            problem = f"{name}={value!r} is not a URL ({exc})"
        else:
            if not url.host or (url.port or 0) > 65535:
                problem = f"{name}={value!r} is not a URL with a host (and a port to 65535)"
    if problem is not None:
        error = EndpointError(problem)
        error.setting = name
        raise error
    return value


def _no_key(message: str, setting: str) -> AuthenticationError:
    error = AuthenticationError(message)
    error.setting = setting
    return error


class EntraToken:
    """Bearer tokens from ``azure-identity``'s ``DefaultAzureCredential``, kept until near expiry.

    ``azure-identity`` is optional (the ``azure`` extra); without it, a Foundry endpoint
    needs ``AZURE_AI_AGENTS_TOKEN``.
    """

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self._lock = threading.Lock()
        self._credential: Any = None
        self._token = ""
        self._expires_on = 0.0

    def __call__(self) -> str:
        """A token valid for at least :data:`TOKEN_MARGIN` more seconds."""
        with self._lock:
            if time.time() < self._expires_on - TOKEN_MARGIN:
                return self._token
            access = self._credential_object().get_token(self.scope)
            self._token, self._expires_on = str(access.token), float(access.expires_on)
            return self._token

    def _credential_object(self) -> Any:
        if self._credential is None:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as exc:
                raise _no_key(
                    "no token for Azure AI Foundry: set AZURE_AI_AGENTS_TOKEN, or install "
                    "toolfan[azure] to use azure-identity's DefaultAzureCredential",
                    "AZURE_AI_AGENTS_TOKEN",
                ) from exc
            self._credential = DefaultAzureCredential()
        return self._credential
