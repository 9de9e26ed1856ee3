"""The ``agents`` source: OpenAI Agents API sessions, answered with ``tool_result`` events.

A batch is one session's pending calls; its id is the session id, and its results go back
as one ``POST /sessions/{id}/events`` whose ``Idempotency-Key`` derives from the session
and the exact body (:mod:`dispatcher.sources.agents_batch`), so every resend of the same
batch carries the same key and the API applies it at most once.

Here the client's errors become the engine's delivery vocabulary (:mod:`tasks.delivery`):

* a refusal naming one event (``param: events[i]...``) names that one result;
* a 404 is "this session is gone" unless the sessions endpoint itself is missing (probed),
  which means ``OPENAI_BASE_URL`` is wrong: a setting, not a verdict on the batch;
* any other refusal of the batch's content (400, 409) refuses the batch;
* a refused key, a wrong URL, DNS, TLS: a setting;
* a transient failure: retry later with the same key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import httpx

from dispatcher.client import AgentsClient
from dispatcher.errors import (
    APIError,
    BadRequestError,
    ConfigurationError,
    FinalAPIError,
    NotFoundError,
    RetryableAPIError,
)
from dispatcher.sources.agents_batch import batch_key, build_body
from dispatcher.transport import connection_limits
from tasks.delivery import Delivered, Misconfigured, Refused, RetryLater
from tasks.settings import get_settings

#: Where a refusal names one event of the batch: ``events[3]`` or ``events[3].output[0]``.
_EVENT_PARAM = re.compile(r"events\[(\d+)\]")


class NoRoute(Misconfigured):
    """The sessions endpoint itself answers 404: the base URL points somewhere else."""


@cache
def get_client() -> AgentsClient:
    """The API client of this process (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``)."""
    settings = get_settings()
    timeout = settings.api_timeout
    return AgentsClient(
        timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)),
        limits=connection_limits(settings.control_threads),
        max_depth=settings.max_depth,
    )


class AgentsSource:
    """Delivers a session's results as one events batch.

    Args:
        client: The API client to use; this process's own (:func:`get_client`) by default,
            made when first needed.
    """

    name = "agents"
    #: Log lines name a session's id as they always did.
    batch_label = "session_id"

    def __init__(self, client: AgentsClient | None = None) -> None:
        self._client = client

    @property
    def client(self) -> AgentsClient:
        """The API client deliveries go through."""
        return self._client if self._client is not None else get_client()

    def batch_ids(self, batch_id: str) -> dict[str, str]:
        """A session's batch id is the session's id."""
        return {"session_id": batch_id}

    def deliver(self, batch_id: str, results: Sequence[Mapping[str, Any]]) -> Delivered:
        """Send one session's results as one batch of ``tool_result`` events."""
        order, body = build_body(results, get_settings().max_batch_bytes)
        key = batch_key(batch_id, body)
        try:
            accepted = self.client.submit_body(batch_id, body, key)
        except BadRequestError as exc:
            raise Refused(
                exc.message, item=_named(exc, order, results), status=_status(exc), key=key
            ) from exc
        except NotFoundError as exc:
            self._probe_route(exc, key)
            raise Refused(exc.message, status=_status(exc), key=key) from exc
        except ConfigurationError as exc:
            raise _misconfigured(exc, key) from exc
        except FinalAPIError as exc:
            raise Refused(exc.message, status=_status(exc), key=key) from exc
        except RetryableAPIError as exc:
            raise RetryLater(exc.message, status="retry", key=key) from exc
        return Delivered(key, str(accepted.status_code), len(order))

    def _probe_route(self, exc: NotFoundError, key: str) -> None:
        """Tell "this session is gone" from "this URL serves no sessions" (then raise)."""
        try:
            self.client.check_access()
        except (NotFoundError, ConfigurationError) as probe:
            raise NoRoute(
                f"{probe.message}: the sessions endpoint is not there, so OPENAI_BASE_URL "
                "is probably wrong",
                setting="OPENAI_BASE_URL",
                kind=NoRoute.__name__,
                status=_status(exc),
                key=key,
            ) from exc


def _named(
    exc: BadRequestError, order: list[tuple[str, str]], results: Sequence[Mapping[str, Any]]
) -> int | None:
    """The index in ``results`` of the one event a refusal names, if it names one."""
    found = _EVENT_PARAM.search(exc.param or "") or _EVENT_PARAM.search(exc.message)
    index = int(found.group(1)) if found else -1
    if not 0 <= index < len(order):
        return None
    pair = order[index]
    return next((i for i, r in enumerate(results) if (r["turn_id"], r["call_id"]) == pair), None)


def _misconfigured(exc: ConfigurationError, key: str) -> Misconfigured:
    return Misconfigured(
        exc.message, setting=exc.setting, kind=type(exc).__name__, status=_status(exc), key=key
    )


def _status(exc: APIError) -> str:
    return str(exc.status_code or "final")


#: The instance the ``toolfan.sources`` entry point names.
SOURCE = AgentsSource()
