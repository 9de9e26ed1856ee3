"""toolfan for applications: write tools once, and hand the fleet the work it cannot find.

Example::

    from toolfan import tool, watch_run

    @tool(timeout=10)
    def get_customer(customer_id: str) -> dict:
        \"\"\"Look up a customer by id.\"\"\"
        ...

    run = client.beta.threads.runs.create(thread_id=thread.id, assistant_id=assistant.id)
    watch_run(thread.id, run.id)   # the fleet answers its tool calls until it is over

This is a thin, stable face over the packages that do the work (``handlers`` for tools,
``tasks`` for the engine, ``dispatcher`` for the protocols); import from here.
"""

from handlers.errors import ToolError
from handlers.registry import tool
from handlers.tool import RUN_AGAIN
from toolfan.calls import (
    arun_function_calls,
    arun_tool_calls,
    run_function_calls,
    run_tool_calls,
)
from toolfan.runs import watch_run, watch_runs

__all__ = [
    "RUN_AGAIN",
    "ToolError",
    "arun_function_calls",
    "arun_tool_calls",
    "run_function_calls",
    "run_tool_calls",
    "tool",
    "watch_run",
    "watch_runs",
]
