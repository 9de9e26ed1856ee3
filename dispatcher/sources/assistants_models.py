"""The parts of a run toolfan reads, parsed so that no answer can crash the reader.

A run is read for its status, its deadline and, when it waits, the function calls of its
``required_action``. Everything else is ignored (the services add fields freely), and a
tool call that is not a well-formed function call is kept as a problem to report, not an
exception: one odd call must not stop the run's other calls from being answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dispatcher.declared import declared_functions
from handlers.jsonsafe import string_pairs

#: Statuses after which a run takes no more outputs.
TERMINAL = frozenset({"completed", "failed", "cancelled", "expired", "incomplete"})
WAITING = "requires_action"
#: The answer header in which the API says how long to wait before reading the run again.
POLL_AFTER_HEADER = "openai-poll-after-ms"
#: Digits of the longest ``openai-poll-after-ms`` read (a day is 8): past that, no request.
POLL_AFTER_DIGITS = 9


@dataclass(frozen=True)
class ToolCall:
    """One function call a waiting run asks for.

    ``arguments`` is the JSON text the model wrote (possibly not JSON at all); it is
    parsed and validated by the engine like any call's arguments.
    """

    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class Run:
    """What toolfan needs of a ``thread.run``."""

    thread_id: str
    run_id: str
    status: str
    expires_at: float | None
    tool_calls: tuple[ToolCall, ...]
    problems: tuple[str, ...] = ()
    assistant_id: str | None = None
    metadata: dict[str, str] | None = None
    declared: frozenset[str] | None = None
    #: Seconds the answer asked to wait before the next read (``openai-poll-after-ms``).
    poll_after: float | None = None

    @property
    def waiting(self) -> bool:
        """Whether the run waits for tool outputs."""
        return self.status == WAITING

    @property
    def finished(self) -> bool:
        """Whether the run takes no more outputs, ever."""
        return self.status in TERMINAL

    @property
    def busy(self) -> bool:
        """Whether the run is in a model turn (queued, in progress, cancelling): not ours."""
        return not self.waiting and not self.finished


def poll_after(value: str | None) -> float | None:
    """Seconds an ``openai-poll-after-ms`` header value asks to wait, or None.

    The SDK's polling reads it as whole milliseconds. A value that is not a plain count
    of them (a sign, a fraction, words, a number of more than
    :data:`POLL_AFTER_DIGITS` digits) asks nothing: the header comes from outside.
    """
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > POLL_AFTER_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text) / 1000


class UnreadableRun(ValueError):
    """An answer that is not a run."""


def parse_run(body: Any, thread_id: str, run_id: str) -> Run:
    """Read a run from its JSON.

    Raises:
        UnreadableRun: the answer is not an object with a string ``status``.
    """
    if not isinstance(body, dict) or not isinstance(body.get("status"), str):
        raise UnreadableRun("the answer is not a run: no 'status'")
    calls, problems = _tool_calls(body) if body["status"] == WAITING else ((), ())
    return Run(
        thread_id=thread_id,
        run_id=run_id,
        status=body["status"],
        expires_at=_number(body.get("expires_at")),
        tool_calls=calls,
        problems=problems,
        assistant_id=_text(body.get("assistant_id")),
        metadata=_metadata(body.get("metadata")),
        declared=declared_functions(body.get("tools")),
    )


def _tool_calls(body: dict[str, Any]) -> tuple[tuple[ToolCall, ...], tuple[str, ...]]:
    action = body.get("required_action")
    outputs = action.get("submit_tool_outputs") if isinstance(action, dict) else None
    raw = outputs.get("tool_calls") if isinstance(outputs, dict) else None
    if not isinstance(raw, list):
        return (), ("requires_action without submit_tool_outputs.tool_calls",)
    calls: list[ToolCall] = []
    problems: list[str] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        call = _tool_call(entry)
        if isinstance(call, str):
            problems.append(f"tool_calls[{index}]: {call}")
        elif call.call_id in seen:
            problems.append(f"tool_calls[{index}]: call id listed twice")
        else:
            seen.add(call.call_id)
            calls.append(call)
    return tuple(calls), tuple(problems)


def _tool_call(entry: Any) -> ToolCall | str:
    if not isinstance(entry, dict):
        return "not an object"
    call_id, function = entry.get("id"), entry.get("function")
    if not isinstance(call_id, str) or not call_id:
        return "no id"
    if entry.get("type", "function") != "function" or not isinstance(function, dict):
        return f"not a function call ({call_id!r})"
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return f"no function name ({call_id!r})"
    return ToolCall(call_id, name, function.get("arguments"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # a 400-digit timestamp: no deadline toolfan can use
        return None
    return number if 0 < number < float("inf") else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _metadata(value: Any) -> dict[str, str] | None:
    return string_pairs(value) or None
