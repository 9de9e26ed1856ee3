"""Queue names and routing, derived from the registry in one place.

Each tool has its own queue (``fn.<name>`` unless it names another), so each function can
get its own workers, pool and concurrency. Two control queues carry toolfan's own work.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from handlers.registry import Registry


class ControlQueue(StrEnum):
    """toolfan's own queues, consumed by every default worker."""

    SUBMIT = "toolfan.submit"
    POLL = "toolfan.poll"
    MODEL = "toolfan.model"


EXECUTE_TASK = "toolfan.execute"
SUBMIT_TASK = "toolfan.submit"
POLL_TASK = "toolfan.poll"
#: A pushed event's targeted dispatch of one session (on the poll queue).
PUSH_TASK = "toolfan.push"
#: A durable tool loop's step (its model call, then its tool calls' dispatch).
MODEL_TASK = "toolfan.model"


def all_queues(registry: Registry) -> list[str]:
    """Every queue a default worker consumes: the function queues, then the control queues."""
    return [*registry.queues(), *(q.value for q in ControlQueue)]


def execute_queue(registry: Registry, name: str) -> str:
    """The queue for a call to ``name``; unknown functions go to the submit queue.

    Unknown names still need a worker to answer them with an "unknown function" error,
    and every default worker consumes the control queues.
    """
    tool = registry.get(name)
    return tool.queue if tool is not None else ControlQueue.SUBMIT.value


class Router:
    """Celery router: ``execute`` by its function name, control tasks to their queues."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def __call__(
        self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any
    ) -> dict[str, str] | None:
        """Pick the queue of a task by its name (and, for ``execute``, its function)."""
        if name == EXECUTE_TASK:
            call = (kwargs or {}).get("call")
            fn = call.get("name", "") if isinstance(call, dict) else ""
            return {"queue": execute_queue(self.registry, str(fn))}
        if name == SUBMIT_TASK:
            return {"queue": ControlQueue.SUBMIT.value}
        if name in (POLL_TASK, PUSH_TASK):
            return {"queue": ControlQueue.POLL.value}
        if name == MODEL_TASK:
            return {"queue": ControlQueue.MODEL.value}
        return None
