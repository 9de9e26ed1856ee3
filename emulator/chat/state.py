"""The chat half of the emulator's world: scripts, stored responses, call records, faults.

``EmulatorState.chat`` holds one :class:`ChatState`; the routes (on uvicorn's loop) and a
test (on its own thread) share it, so every public method takes its lock and returns
copies. Nothing here depends on time except the timestamps answers carry: the model is a
function of the request and of the responses stored so far.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from emulator.chat.chat_answer import chat_completion
from emulator.chat.chat_request import parse_chat
from emulator.chat.faults import ChatFaults, FaultPlan
from emulator.chat.ids import derived_id
from emulator.chat.model import Reply, respond
from emulator.chat.records import CHAT, CallContext, CallRecord
from emulator.chat.responses_answer import response_object
from emulator.chat.responses_request import Context, parse_responses
from emulator.chat.script import BUILTIN, Script, parse_script
from emulator.wire import JSON, WireError


@dataclass(frozen=True)
class StoredResponse:
    """A response kept for ``GET /responses/{id}`` and for requests chained to it."""

    body: JSON
    context: Context


def _no_script(name: str) -> WireError:
    return WireError(404, f"No script named '{name}'.", code="not_found")


class ChatState:
    """Scripts and recordings of the model endpoints.

    Args:
        clock: Wall clock for the answers' ``created`` times and the records' ``at``.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self._scripts: dict[str, Script] = {}
        self._responses: dict[str, StoredResponse] = {}
        self._calls: list[CallRecord] = []
        self._counts: Counter[tuple[str, int]] = Counter()
        self._faults = ChatFaults()

    def clear(self) -> None:
        """Forget scripts, stored responses, records, counts and faults."""
        with self._lock:
            self._scripts.clear()
            self._responses.clear()
            self._calls.clear()
            self._counts.clear()
            self._faults = ChatFaults()

    # --- scripts -----------------------------------------------------------------------------

    def set_script(self, name: str, steps: Iterable[Any], match: str | None = None) -> JSON:
        """Set (or replace) a script; ``match=None`` makes it the default. Returns its JSON.

        A conversation whose first user message contains ``match`` gets this script (the
        first such script, in the order they were set); one matching none gets the default
        script set last, or the built-in one.
        """
        script = parse_script(name, steps, match)
        with self._lock:
            self._scripts.pop(name, None)  # a replaced script moves to the end
            self._scripts[name] = script
            return script.to_json()

    def script(self, name: str) -> JSON:
        """One script's JSON; 404 when unknown."""
        with self._lock:
            if name not in self._scripts:
                raise _no_script(name)
            return self._scripts[name].to_json()

    def scripts(self) -> JSON:
        """``{"data": [scripts, in order set], "default": name of the default script}``."""
        with self._lock:
            return {
                "data": [s.to_json() for s in self._scripts.values()],
                "default": self._default().name,
                "builtin": BUILTIN.to_json(),
            }

    def delete_script(self, name: str) -> None:
        """Forget a script; 404 when unknown."""
        with self._lock:
            if self._scripts.pop(name, None) is None:
                raise _no_script(name)

    def select(self, conversation: str) -> Script:
        """The script answering a conversation that opened with ``conversation``."""
        with self._lock:
            chosen = next((s for s in self._scripts.values() if s.matches(conversation)), None)
            return chosen or self._default()

    def _default(self) -> Script:
        defaults = [s for s in self._scripts.values() if s.match is None]
        return defaults[-1] if defaults else BUILTIN

    # --- faults ------------------------------------------------------------------------------

    def set_faults(self, faults: ChatFaults | None = None, **knobs: Any) -> ChatFaults:
        """Replace the fault knobs (an object, or knobs over the defaults)."""
        with self._lock:
            self._faults = faults or ChatFaults(**knobs)
            return self._faults

    @property
    def faults(self) -> ChatFaults:
        """The fault knobs now (``fail_next`` counts down as calls fail)."""
        with self._lock:
            return self._faults

    def take_fault(self) -> FaultPlan:
        """Decide the fate of one arriving model call, spending one failure if any are left."""
        with self._lock:
            faults = self._faults
            if faults.fail_next <= 0:
                return FaultPlan(faults.delay)
            self._faults = faults.spent()
            outcome = "throttle" if faults.status == 429 else "error"
            return FaultPlan(faults.delay, faults.error(), outcome)

    # --- the model ---------------------------------------------------------------------------

    def answer(self, context: CallContext, body: Any) -> JSON:
        """Validate a model call and answer it; 400 ``WireError`` when the API would refuse.

        Only answered calls are recorded here; the routes record refused and failed ones
        (``record_failure``), which may fail before a body exists.
        """
        with self._lock:
            if context.endpoint == CHAT:
                answer, reply = self._chat(context, body)
            else:
                answer, reply = self._respond(body)
            self._counts[(reply.script, reply.step)] += 1
            self._record(context, body, 200, "ok", reply=reply, answer_id=answer["id"])
            return copy.deepcopy(answer)

    def _chat(self, context: CallContext, body: Any) -> tuple[JSON, Reply]:
        request = parse_chat(body, context.deployment)
        reply = respond(self.select(request.turn.conversation), request.turn)
        answer = chat_completion(
            reply,
            completion_id=derived_id("chatcmpl", CHAT, context.deployment, body, separator="-"),
            model=request.model,
            created=int(self.clock()),
            request_body=body,
        )
        return answer, reply

    def _respond(self, body: Any) -> tuple[JSON, Reply]:
        request = parse_responses(body, self._context)
        reply = respond(self.select(request.turn.conversation), request.turn)
        response_id = derived_id("resp", body)
        answer = response_object(
            reply, request, response_id=response_id, created=int(self.clock()), request_body=body
        )
        if request.store:
            after = request.context.after([c.call_id for c in reply.calls])
            self._responses[response_id] = StoredResponse(answer, after)
        return answer, reply

    def _context(self, response_id: str) -> Context | None:
        stored = self._responses.get(response_id)
        return None if stored is None else stored.context

    def response(self, response_id: str) -> JSON:
        """A stored response, as ``GET /responses/{id}`` answers it; 404 when unknown."""
        with self._lock:
            stored = self._responses.get(response_id)
            if stored is None:
                raise WireError(404, f"Response with id '{response_id}' not found.")
            return copy.deepcopy(stored.body)

    # --- records -----------------------------------------------------------------------------

    def record_failure(
        self, context: CallContext, body: Any, error: WireError, outcome: str = "refused"
    ) -> None:
        """Record a model call that was not answered: refused (4xx) or failed by a fault."""
        with self._lock:
            self._record(context, body, error.status, outcome, error=error.body())

    def _record(
        self,
        context: CallContext,
        body: Any,
        status: int,
        outcome: str,
        *,
        reply: Reply | None = None,
        answer_id: str | None = None,
        error: JSON | None = None,
    ) -> None:
        record = CallRecord(
            seq=len(self._calls) + 1,
            context=context,
            request=copy.deepcopy(body),
            status=status,
            outcome=outcome,
            at=self.clock(),
            script=None if reply is None else reply.script,
            step=None if reply is None else reply.step,
            turn=None if reply is None else reply.turn,
            answer_id=answer_id,
            error=error,
        )
        self._calls.append(record)

    def calls(
        self,
        script: str | None = None,
        *,
        refused: bool | None = None,
        endpoint: str | None = None,
    ) -> list[JSON]:
        """Every model call recorded, oldest first, optionally filtered.

        ``script`` keeps the calls a script answered; ``refused=True`` only the refused
        ones (``False``: all others); ``endpoint`` ``chat.completions`` or ``responses``.
        """
        with self._lock:
            return [
                r.to_json()
                for r in self._calls
                if script in (None, r.script)
                and refused in (None, r.outcome == "refused")
                and endpoint in (None, r.context.endpoint)
            ]

    def count(self, script: str, step: int) -> int:
        """How many model calls step ``step`` of ``script`` answered."""
        with self._lock:
            return self._counts[(script, step)]

    def counts(self, script: str | None = None) -> dict[str, dict[int, int]]:
        """Answered calls per script and step: ``{script: {step: count}}``."""
        with self._lock:
            table: dict[str, dict[int, int]] = {}
            for (name, step), count in sorted(self._counts.items()):
                if script in (None, name):
                    table.setdefault(name, {})[step] = count
            return table
