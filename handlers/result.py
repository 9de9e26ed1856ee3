"""The result of one function call, as every layer passes it around.

A call always ends in a :class:`CallResult`, never in an exception: a chord whose header
task raises never runs its callback, so failures travel as data. ``outcome`` names the kind
of ending for logs and metrics; the model only ever sees ``output`` or ``error``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from handlers.text import scrub


class Outcome(StrEnum):
    """How a call ended; one label per error mapping, so each can be counted."""

    OK = "ok"
    INVALID_ARGUMENTS = "invalid_arguments"
    UNKNOWN_FUNCTION = "unknown_function"
    TOOL_ERROR = "tool_error"
    EXCEPTION = "exception"
    TIMEOUT = "timeout"
    BAD_OUTPUT = "bad_output"
    OUTCOME_UNKNOWN = "outcome_unknown"
    POISON = "poison"
    REFUSED = "refused"
    """The API refused the result as sent; an error explaining that went in its place."""
    CANCELLED = "cancelled"
    """The call's batch ended (its run was cancelled or expired) before the call began."""
    DENIED = "denied"
    """An authorization policy, or the agent's own list of tools, did not let it run."""


class InputText(BaseModel):
    """A text part of a content-array output."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input_text"] = "input_text"
    text: str


class InputImage(BaseModel):
    """An image part of a content-array output, by URL or data URL."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input_image"] = "input_image"
    image_url: str
    detail: Literal["auto", "low", "high"] | None = None


ContentPart = Annotated[InputText | InputImage, Field(discriminator="type")]
Output = str | list[ContentPart]


class CallResult(BaseModel):
    """What a function call produced: an output on success, else an error for the model."""

    model_config = ConfigDict(frozen=True)

    success: bool
    outcome: Outcome
    output: Output | None = None
    error: str | None = None

    @classmethod
    def ok(cls, output: Output) -> CallResult:
        """A successful result carrying an already serialized (and scrubbed) output."""
        if isinstance(output, str):
            output = scrub(output)
        return cls(success=True, outcome=Outcome.OK, output=output)

    @classmethod
    def fail(cls, outcome: Outcome, error: str) -> CallResult:
        """A failed result whose ``error`` is written for the model (never empty)."""
        return cls(success=False, outcome=outcome, error=scrub(error) or EMPTY_ERROR)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON-safe form stored in the ledger and returned by Celery tasks."""
        return self.model_dump(mode="json", exclude_none=True)

    def stored(self) -> str:
        """The JSON text the ledger keeps."""
        return self.model_dump_json(exclude_none=True)


#: The error sent for a failure whose own message was empty: the API refuses an empty one.
EMPTY_ERROR = "The function failed without saying why."
