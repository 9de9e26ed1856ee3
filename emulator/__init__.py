"""A local, wire-true stand-in for the OpenAI Agents API and the Assistants protocol.

It serves the Agents sessions endpoints and the run-shaped threads-and-runs API in three
flavours (OpenAI, Azure OpenAI, Azure AI Foundry Agent Service). Serve it with ``toolfan
emulator``; script it from Python through :class:`EmulatorState` or from another process
through the ``/_emulator`` admin routes (see ``emulator/README.md``). It imports nothing
from the rest of toolfan, so it can stand in for the real service in any test without
sharing a bug with the code under test.
"""

from __future__ import annotations

from emulator.app import EmulatorApp
from emulator.faults import Faults
from emulator.jsontext import RawJson
from emulator.server import EmulatorServer, serve
from emulator.state import AcceptedBatch, EmulatorState, RequestRecord
from emulator.testing import running_emulator
from emulator.webhooks import WebhookFaults
from emulator.wire import (
    computer_use_approval_request,
    environment_connection,
    function_call,
    mcp_approval_request,
)

__all__ = [
    "AcceptedBatch",
    "EmulatorApp",
    "EmulatorServer",
    "EmulatorState",
    "Faults",
    "RawJson",
    "RequestRecord",
    "WebhookFaults",
    "computer_use_approval_request",
    "environment_connection",
    "function_call",
    "mcp_approval_request",
    "running_emulator",
    "serve",
]
