"""toolfan for applications: write tools once, and hand the fleet the work.

Example::

    import toolfan

    @toolfan.tool(timeout=10)
    def get_customer(customer_id: str) -> dict:
        \"\"\"Look up a customer by id.\"\"\"
        ...

    # Chat Completions or Responses driven by the application: the fleet as a function call
    messages += toolfan.run_tool_calls(message.tool_calls, conversation_id=chat_id)
    items += toolfan.run_function_calls(response.output, conversation_id=chat_id)
    tools = toolfan.tool_definitions("chat")          # or "responses", "assistants", "agents"

    # the whole tool loop on the fleet, durable across crashes
    cid = toolfan.start_conversation(model="gpt-4.1-mini", input="Weather in Paris?")
    print(toolfan.conversation_result(cid, timeout=120).text)

    # an Assistants-style run: the fleet answers its tool calls until it is over
    toolfan.watch_run(thread.id, run.id)

This is a thin, stable face over the packages that do the work (``handlers`` for tools,
``tasks`` for the engine, ``dispatcher`` for the protocols); import from here.
"""

from handlers.context import CallContext, call_context
from handlers.definitions import tool_definitions
from handlers.errors import ToolError
from handlers.policy import Allow, Deny, RequireApproval
from handlers.registry import tool
from handlers.tool import RUN_AGAIN
from toolfan.calls import (
    arun_function_calls,
    arun_tool_calls,
    run_function_calls,
    run_tool_calls,
)
from toolfan.conversations import (
    ConversationError,
    ConversationResult,
    conversation_result,
    start_conversation,
)
from toolfan.runs import watch_run, watch_runs

__all__ = [
    "Allow",
    "CallContext",
    "ConversationError",
    "ConversationResult",
    "Deny",
    "RUN_AGAIN",
    "RequireApproval",
    "ToolError",
    "arun_function_calls",
    "arun_tool_calls",
    "call_context",
    "conversation_result",
    "run_function_calls",
    "run_tool_calls",
    "start_conversation",
    "tool",
    "tool_definitions",
    "watch_run",
    "watch_runs",
]
