"""The record of every model call: answered, refused or failed, in arrival order.

A tool loop's test reads these to prove what its client did: which step answered each
call (and so how many times a step ran), what the client sent, and that nothing it sent
was refused (``outcome`` ``refused``: validation and credentials, as distinct from the
``error`` and ``throttle`` faults the test itself injected).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from emulator.wire import JSON

CHAT = "chat.completions"
RESPONSES = "responses"


@dataclass(frozen=True)
class CallContext:
    """Where a model call came in.

    Attributes:
        endpoint: ``chat.completions`` or ``responses``.
        surface: ``openai``, ``azure-openai`` or ``azure-v1`` (see ``emulator.chat.surfaces``).
        path: The request path, percent-decoded.
        deployment: The Azure deployment named in the path (the model), if any.
    """

    endpoint: str
    surface: str
    path: str
    deployment: str | None = None


@dataclass(frozen=True)
class CallRecord:
    """One model call and its fate.

    Attributes:
        seq: Its position among all calls, from 1.
        context: Where it came in.
        request: The JSON body (``None`` when it did not parse, or credentials failed).
        status: The HTTP status answered.
        outcome: ``ok``, ``refused`` (a 4xx), ``error`` or ``throttle`` (injected faults).
        at: Wall-clock time received (``time.time()``).
        script: The answering script (answered calls only).
        step: The step that answered.
        turn: The model turn answered (above ``step`` once a looping script repeats).
        answer_id: The ``chatcmpl-...`` or ``resp_...`` id answered.
        error: The error JSON answered, for a call not answered.
    """

    seq: int
    context: CallContext
    request: Any
    status: int
    outcome: str
    at: float
    script: str | None = None
    step: int | None = None
    turn: int | None = None
    answer_id: str | None = None
    error: JSON | None = None

    def to_json(self) -> JSON:
        """The admin API's form."""
        return {
            "seq": self.seq,
            "endpoint": self.context.endpoint,
            "surface": self.context.surface,
            "path": self.context.path,
            "deployment": self.context.deployment,
            "script": self.script,
            "step": self.step,
            "turn": self.turn,
            "answer_id": self.answer_id,
            "status": self.status,
            "outcome": self.outcome,
            "refused": self.outcome == "refused",
            "error": copy.deepcopy(self.error),
            "request": copy.deepcopy(self.request),
            "at": self.at,
        }
