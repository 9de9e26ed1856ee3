"""A small client for the run endpoints of the Assistants protocol, in its three flavours.

Only what toolfan needs: read a run, list a thread's runs, list threads (Foundry only),
and submit one phase's tool outputs. The flavour decides the base URL, the credential
header and the ``api-version`` parameter (:mod:`dispatcher.sources.assistants_config`);
the paths are the same everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

import httpx

from dispatcher.client import path_segment, user_agent
from dispatcher.retry import RetryPolicy
from dispatcher.sources.assistants_config import AssistantsConfig, load_config
from dispatcher.sources.assistants_models import (
    POLL_AFTER_HEADER,
    Run,
    UnreadableRun,
    parse_run,
    poll_after,
)
from dispatcher.transport import DEFAULT_LIMITS, DEFAULT_TIMEOUT, Transport

#: Levels of a run around a call's arguments (run, action, outputs, calls, call, function).
RUN_DEPTH = 8


@dataclass(frozen=True)
class Output:
    """One tool output of a submit: the call it answers and the text."""

    tool_call_id: str
    output: str


class AssistantsClient:
    """Runs and threads of one Assistants-protocol service.

    Args:
        config: Where and how; read from the environment when omitted.
        timeout: Per-request timeouts.
        retry: Retry bounds.
        transport: An httpx transport to use instead of the network (tests).
        max_depth: Nesting allowed in a call's arguments.
    """

    def __init__(
        self,
        config: AssistantsConfig | None = None,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        limits: httpx.Limits = DEFAULT_LIMITS,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        max_depth: int = 64,
    ) -> None:
        self.config = config if config is not None else load_config()
        headers = {
            **self.config.headers,
            "User-Agent": user_agent(),
            "Accept": "application/json",
        }
        self._transport = Transport(
            self.config.base_url,
            headers,
            params=self.config.params,
            bearer=self.config.bearer,
            secrets=self.config.secrets,
            key_setting=self.config.key_setting,
            url_setting=self.config.url_setting,
            timeout=timeout,
            limits=limits,
            retry=retry,
            transport=transport,
            max_depth=max_depth,
        )

    @property
    def base_url(self) -> str:
        """The root of the run paths."""
        return self.config.base_url

    def close(self) -> None:
        """Close the pooled connections."""
        self._transport.close()

    def __enter__(self) -> AssistantsClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def retrieve_run(self, thread_id: str, run_id: str) -> Run:
        """A run's current state.

        Raises:
            NotFoundError: no such thread or run.
            UnexpectedResponseError: the answer is not a run.
        """
        response, _ = self._transport.request("GET", _run_path(thread_id, run_id))
        return self._run(response, thread_id, run_id)

    def submit_tool_outputs(self, thread_id: str, run_id: str, outputs: Sequence[Output]) -> Run:
        """Submit every output of one phase in one request; the run as it is then.

        Raises:
            BadRequestError: refused, e.g. because the run no longer waits for these calls.
        """
        body = json.dumps(
            {
                "tool_outputs": [
                    {"tool_call_id": o.tool_call_id, "output": o.output} for o in outputs
                ],
                "stream": False,
            },
            separators=(",", ":"),
        ).encode()
        response, _ = self._transport.request(
            "POST",
            f"{_run_path(thread_id, run_id)}/submit_tool_outputs",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        return self._run(response, thread_id, run_id)

    def check_access(self, thread_id: str = "thread_toolfan_check") -> None:
        """One cheap authenticated request, to vet the settings (a 404 is a good answer)."""
        path = "/threads" if self.config.lists_threads else f"/threads/{thread_id}/runs"
        try:
            self._transport.request("GET", path, params=[("limit", "1")])
        except Exception as exc:
            if getattr(exc, "status_code", None) == 404 and not self.config.lists_threads:
                return
            raise

    def list_threads(self, limit: int) -> Iterator[str]:
        """Thread ids, most recent first, at most ``limit`` (Foundry only: ``GET /threads``).

        Pages follow ``last_id`` (the service's own SDK ignores ``has_more``), and a
        repeated cursor ends the listing.
        """
        seen = 0
        after: str | None = None
        cursors: set[str] = set()
        while seen < limit:
            params = [("limit", str(min(100, limit - seen))), ("order", "desc")]
            if after is not None:
                params.append(("after", after))
            response, _ = self._transport.request("GET", "/threads", params=params)
            body = self._transport.json(response)
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list):
                raise self._transport.unexpected(response, "thread list unreadable: no 'data'")
            for entry in data:
                thread_id = entry.get("id") if isinstance(entry, dict) else None
                if isinstance(thread_id, str) and thread_id and seen < limit:
                    seen += 1
                    yield thread_id
            after = body.get("last_id") if isinstance(body.get("last_id"), str) else None
            if not data or after is None or after in cursors:
                return
            cursors.add(after)

    def runs_of(self, thread_id: str, limit: int = 20) -> list[Run]:
        """The thread's most recent runs (one page)."""
        response, _ = self._transport.request(
            "GET",
            f"/threads/{path_segment(thread_id)}/runs",
            params=[("limit", str(limit)), ("order", "desc")],
        )
        body = self._transport.json(response, RUN_DEPTH + 2)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise self._transport.unexpected(response, "run list unreadable: no 'data'")
        runs = []
        for entry in data:
            run_id = entry.get("id") if isinstance(entry, dict) else None
            if isinstance(run_id, str) and run_id:
                try:
                    runs.append(parse_run(entry, thread_id, run_id))
                except UnreadableRun:
                    continue
        return runs

    def _run(self, response: httpx.Response, thread_id: str, run_id: str) -> Run:
        body: Any = self._transport.json(response, RUN_DEPTH)
        try:
            run = parse_run(body, thread_id, run_id)
        except UnreadableRun as exc:
            raise self._transport.unexpected(response, str(exc)) from exc
        asked = poll_after(response.headers.get(POLL_AFTER_HEADER))
        return run if asked is None else replace(run, poll_after=asked)


def _run_path(thread_id: str, run_id: str) -> str:
    return f"/threads/{path_segment(thread_id)}/runs/{path_segment(run_id)}"
