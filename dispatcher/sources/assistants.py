"""The ``assistants`` source: runs of the Assistants protocol, answered with tool outputs.

A batch is one ``requires_action`` phase of one run; its id names the thread and the run
(:func:`batch_id`), and its calls share a turn id naming the phase (:func:`phase_of`), so
a run that comes back with new calls makes a new batch. Its results go back as one
``submit_tool_outputs`` request. Outputs are strings: the tool's output, a content array
flattened to its text, and a failure as the JSON text ``{"error": "<message>"}``.

The protocol takes no idempotency key, so exactly-once comes from the run itself: the API
takes one submit per phase, with every output of it, and refuses any other. After a
submit that was refused, failed or lost its answer, the run is read. A run that has moved
past the phase (it runs, waits for other calls, or completed) had the phase answered, so
the batch counts as delivered; a run that expired, failed or was cancelled takes nothing,
and neither does one that waits for calls toolfan could not read: the batch is refused.
The run is not read before a first submit: that read found the run waiting in all but
the rare resend, and cost a request per phase.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import httpx

from dispatcher.errors import (
    APIError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    FinalAPIError,
    NotFoundError,
    RetryableAPIError,
)
from dispatcher.sources.assistants_client import AssistantsClient, Output
from dispatcher.sources.assistants_models import Run
from dispatcher.sources.outputs import output_text
from dispatcher.transport import connection_limits
from tasks.delivery import Delivered, Misconfigured, Refused, RetryLater
from tasks.settings import get_settings

NAME = "assistants"


def batch_id(thread_id: str, run_id: str) -> str:
    """The batch id of a run's phase: the thread and the run, as a JSON array (injective)."""
    return json.dumps([thread_id, run_id])


def run_of(batch: str) -> tuple[str, str]:
    """The thread and run a batch id names.

    Raises:
        ValueError: it is not a batch id of this source.
    """
    value = json.loads(batch)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError(f"not a run batch id: {batch[:200]!r}")
    return value[0], value[1]


def phase_of(call_ids: Sequence[str]) -> str:
    """The turn id of one phase: a digest of its calls' ids (phases never share a call)."""
    digest = hashlib.sha256(json.dumps(sorted(call_ids)).encode()).hexdigest()
    return f"phase_{digest[:24]}"


@cache
def get_client() -> AssistantsClient:
    """The runs client of this process, from the environment its SDKs use."""
    settings = get_settings()
    timeout = settings.api_timeout
    return AssistantsClient(
        timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)),
        limits=connection_limits(settings.control_threads),
        max_depth=settings.max_depth,
    )


class AssistantsSource:
    """Delivers one phase of a run as one ``submit_tool_outputs``.

    Args:
        client: The runs client; this process's own by default, made when first needed.
    """

    name = NAME
    #: A run can be cancelled, fail or expire before its phase is answered.
    batches_end = True

    def __init__(self, client: AssistantsClient | None = None) -> None:
        self._client = client

    @property
    def client(self) -> AssistantsClient:
        """The runs client deliveries go through."""
        return self._client if self._client is not None else get_client()

    def batch_ids(self, batch_id: str) -> dict[str, str]:
        """A phase's batch id names its thread and run (ValueError for any other id)."""
        thread_id, run_id = run_of(batch_id)
        return {"thread_id": thread_id, "run_id": run_id}

    def deliver(self, batch_id: str, results: Sequence[Mapping[str, Any]]) -> Delivered:
        """Submit a phase's outputs once; a run past the phase counts as delivered.

        The run is read only when the submit is refused or its answer lost: the API refuses
        outputs a run does not wait for (past the phase, over, or waiting for more calls),
        and the read then says which.
        """
        thread_id, run_id = run_of(batch_id)
        by_call = {str(r["call_id"]): r for r in results}
        outputs = [Output(call_id, output_text(result)) for call_id, result in by_call.items()]
        key = _key(batch_id, outputs)
        try:
            self.client.submit_tool_outputs(thread_id, run_id, outputs)
        except (BadRequestError, ConflictError, RetryableAPIError) as exc:
            after = _settled(self._read(thread_id, run_id), set(by_call), key)
            if after is not None:
                return after
            raise _translated(exc, key) from exc
        except APIError as exc:
            raise _translated(exc, key) from exc
        return Delivered(key, "200", len(outputs))

    def _read(self, thread_id: str, run_id: str) -> Run:
        try:
            return self.client.retrieve_run(thread_id, run_id)
        except APIError as exc:
            raise _translated(exc, "") from exc


def _settled(run: Run, ours: set[str], key: str) -> Delivered | None:
    """What the run's state says of our phase; None while it waits for exactly these calls.

    Raises:
        Refused: the run is over without taking them, or waits for calls toolfan lacks.
    """
    waiting = {c.call_id for c in run.tool_calls}
    if run.waiting and waiting == ours:
        return None
    if run.status in ("expired", "cancelled", "failed", "incomplete"):
        raise Refused(f"the run is {run.status}: it takes no tool outputs", key=key)
    if run.waiting and ours < waiting:
        missing = ", ".join(sorted(waiting - ours)[:5])
        raise Refused(f"the run also waits for calls toolfan could not read: {missing}", key=key)
    return Delivered(key, "past", len(ours))


def _key(batch: str, outputs: Sequence[Output]) -> str:
    """The identity of one submit (this API takes no key): batch and exact outputs."""
    pairs = sorted([o.tool_call_id, o.output] for o in outputs)
    body = json.dumps([batch, pairs])
    return f"toolfan-{hashlib.sha256(body.encode()).hexdigest()[:40]}"


def _translated(exc: APIError, key: str) -> Exception:
    status = str(exc.status_code or "final")
    if isinstance(exc, ConfigurationError):
        kind = type(exc).__name__
        return Misconfigured(exc.message, setting=exc.setting, kind=kind, status=status, key=key)
    if isinstance(exc, NotFoundError):
        return Refused(exc.message, status=status, key=key)
    if isinstance(exc, FinalAPIError):
        return Refused(exc.message, status=status, key=key)
    return RetryLater(exc.message, status="retry", key=key)


#: The instance the ``toolfan.sources`` entry point names.
SOURCE = AssistantsSource()
