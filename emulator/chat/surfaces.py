"""Where the model endpoints live and how each way in authenticates.

==============  ==================================================  ============================
surface         chat / responses paths                              credentials
==============  ==================================================  ============================
openai          ``/v1/chat/completions``, ``/v1/responses``         ``Authorization: Bearer``
azure-openai    ``/openai/deployments/{deployment}/chat/            ``api-key`` or ``Bearer``;
                completions``, ``/openai/responses``                ``?api-version=`` required
azure-v1        ``/openai/v1/chat/completions``,                    ``api-key`` or ``Bearer``
                ``/openai/v1/responses``                            (no ``api-version``)
==============  ==================================================  ============================

``openai.AzureOpenAI(azure_endpoint=URL)`` speaks azure-openai (it puts the model in the
path as the deployment); ``openai.OpenAI(base_url=URL + "/openai/v1")`` speaks azure-v1,
Azure's version-less API, which Azure AI Foundry's current agents use. No ``OpenAI-Beta``
header is needed: these APIs are not in beta. The credential rules are the run flavours'.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from emulator.api import check_bearer

# The Azure credential rule is the runs flavour's own, reused rather than restated.
from emulator.runs.flavours import _AZURE_DENIED, AZURE_OPENAI, _bearer_token, _require


@dataclass(frozen=True)
class Surface:
    """One way in to the scripted model.

    Attributes:
        name: ``openai``, ``azure-openai`` or ``azure-v1`` (recorded on each call).
        prefix: The prefix of the ``responses`` routes.
        chat_path: The chat completions route.
    """

    name: str
    prefix: str
    chat_path: str

    def authenticate(self, request: Request, api_key: str | None) -> None:
        """Refuse the request (401, 400) unless it carries this surface's credentials."""
        if self.name == "openai":
            check_bearer(request, api_key)
        elif self.name == "azure-openai":
            AZURE_OPENAI.authenticate(request, lambda: (api_key, False))
        else:
            credential = request.headers.get("api-key", "").strip() or _bearer_token(request)
            _require(credential, api_key, _AZURE_DENIED, "401")


OPENAI = Surface("openai", "/v1", "/v1/chat/completions")
AZURE_OPENAI_SURFACE = Surface(
    "azure-openai", "/openai", "/openai/deployments/{deployment}/chat/completions"
)
AZURE_V1 = Surface("azure-v1", "/openai/v1", "/openai/v1/chat/completions")
SURFACES = (OPENAI, AZURE_OPENAI_SURFACE, AZURE_V1)
