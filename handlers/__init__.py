"""toolfan's tool API: declare functions once, typed, and let the fleet run them.

Example::

    from typing import Annotated
    from pydantic import Field
    from handlers import tool, ToolError

    @tool(timeout=10)
    def get_customer(customer_id: Annotated[str, Field(description="The customer's id")]) -> dict:
        \"\"\"Look up a customer by id.\"\"\"
        ...

This package knows pydantic only: no Celery, no HTTP, so tools can be tested as plain
functions.
"""

from handlers.context import CallContext, call_context, idempotency_key
from handlers.definitions import Api, tool_definitions
from handlers.errors import RegistryError, ToolError, ToolfanError
from handlers.policy import Allow, Deny, RequireApproval
from handlers.registry import Registry, build_tool, registry, tool
from handlers.result import CallResult, InputImage, InputText, Outcome
from handlers.tool import RUN_AGAIN, Tool, queue_for

__all__ = [
    "Allow",
    "Api",
    "CallContext",
    "CallResult",
    "Deny",
    "InputImage",
    "InputText",
    "Outcome",
    "RUN_AGAIN",
    "Registry",
    "RegistryError",
    "RequireApproval",
    "Tool",
    "ToolError",
    "ToolfanError",
    "build_tool",
    "call_context",
    "idempotency_key",
    "queue_for",
    "registry",
    "tool",
    "tool_definitions",
]
