"""The three flavours of the run-shaped API: where each lives and how it authenticates.

=============  ==========================  ===========================================
flavour        prefix                      credentials and required headers
=============  ==========================  ===========================================
openai         ``/v1``                     ``Authorization: Bearer``; ``OpenAI-Beta:
                                           assistants=v2``
azure-openai   ``/openai``                 ``api-key`` or ``Authorization: Bearer``;
                                           ``?api-version=`` (any non-empty value)
foundry        ``/api/projects/{project}`` ``Authorization: Bearer`` only;
                                           ``?api-version=`` (the SDK sends ``v1``)
=============  ==========================  ===========================================

With an ``api_key`` set on the app, the token (or ``api-key``) must equal it; without one
any non-empty credential passes, as for the sessions API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from emulator.api import check_bearer, check_beta
from emulator.paths import query_items
from emulator.wire import WireError

#: Reads the app's current ``(api_key, require_beta_header)``: both may change while serving.
Settings = Callable[[], tuple[str | None, bool]]

_AZURE_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API "
    "endpoint for your resource."
)
_FOUNDRY_DENIED = "Access denied: send a Microsoft Entra ID token (Authorization: Bearer <token>)."


def _bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def check_api_version(request: Request) -> None:
    """400 unless the query carries a non-empty ``api-version``."""
    if not dict(query_items(request.scope)).get("api-version"):
        raise WireError(
            400,
            "The api-version query parameter (?api-version=) is required for all requests.",
            code="MissingApiVersionParameter",
            param="api-version",
        )


@dataclass(frozen=True)
class Flavour:
    """One way in to the run store.

    Attributes:
        name: ``openai``, ``azure-openai`` or ``foundry`` (recorded on each submit).
        prefix: The route prefix; Foundry's holds the ``{project}`` segment.
        null_last_id: Whether list pages end with ``last_id: null`` (Foundry's SDK pages
            by ``last_id`` alone and would otherwise ask for one more, empty, page).
        lists_threads: Whether ``GET {prefix}/threads`` exists (Foundry only).
    """

    name: str
    prefix: str
    null_last_id: bool = False
    lists_threads: bool = False

    def authenticate(self, request: Request, settings: Settings) -> None:
        """Refuse the request (401, 400) unless it carries this flavour's credentials."""
        api_key, require_beta = settings()
        if self.name == "openai":
            check_bearer(request, api_key)
            if require_beta:
                check_beta(request, "assistants=v2", "Assistants")
        elif self.name == "azure-openai":
            credential = request.headers.get("api-key", "").strip() or _bearer_token(request)
            _require(credential, api_key, _AZURE_DENIED, "401")
            check_api_version(request)
        else:
            _require(_bearer_token(request), api_key, _FOUNDRY_DENIED, "Unauthorized")
            check_api_version(request)


def _require(credential: str | None, api_key: str | None, message: str, code: str) -> None:
    if credential is None or (api_key is not None and credential != api_key):
        raise WireError(401, message, code=code)


OPENAI = Flavour("openai", "/v1")
AZURE_OPENAI = Flavour("azure-openai", "/openai")
FOUNDRY = Flavour("foundry", "/api/projects/{project}", null_last_id=True, lists_threads=True)
FLAVOURS = (OPENAI, AZURE_OPENAI, FOUNDRY)
