"""The approval inbox over HTTP, on the intake server, for operators and their tools.

* ``GET /approvals``: the pending approvals, the nearest deadline first (``{"data": [...]}``);
* ``GET /approvals/{id}``: one approval, request and decision;
* ``POST /approvals/{id}/approve`` (``{"by", "reason"}``, both optional) and
  ``POST /approvals/{id}/deny`` (``{"by", "reason"}``, the reason required).

Every route needs ``Authorization: Bearer $TOOLFAN_INTAKE_TOKEN`` (compared in constant
time) and is off (403) while it is unset. A decision is taken once: a second one answers
409 naming the decision that counts; one past the deadline answers 409 too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tasks.approvals import ApprovalStore, State

#: Bytes of a decision's body read at most.
MAX_BODY = 65_536

Check = Callable[[Mapping[str, str]], Response | None]


class ApprovalsApi:
    """The routes, over the ledger's Redis and the intake's token check."""

    def __init__(self, store: ApprovalStore, check: Check) -> None:
        self.store = store
        self.check = check

    async def list(self, request: Request) -> Response:
        """The pending approvals."""
        refused = self.check(request.headers)
        if refused is not None:
            return refused
        pending = await self._safely(self.store.pending)
        if isinstance(pending, Response):
            return pending
        return JSONResponse({"data": [a.to_json() for a in pending]})

    async def show(self, request: Request) -> Response:
        """One approval."""
        refused = self.check(request.headers)
        if refused is not None:
            return refused
        aid = request.path_params["approval_id"]
        found = await self._safely(lambda: self.store.get(aid))
        if isinstance(found, Response):
            return found
        if found is None:
            return JSONResponse({"error": f"no approval {aid[:200]!r}"}, 404)
        return JSONResponse(found.to_json())

    async def approve(self, request: Request) -> Response:
        """Approve one call."""
        return await self._decide(request, State.APPROVED)

    async def deny(self, request: Request) -> Response:
        """Deny one call (a reason is required: the model is told it)."""
        return await self._decide(request, State.DENIED)

    async def _decide(self, request: Request, decision: State) -> Response:
        refused = self.check(request.headers)
        if refused is not None:
            return refused
        body = await _body(request)
        if isinstance(body, Response):
            return body
        by, reason = body.get("by") or "operator", body.get("reason") or ""
        if not isinstance(by, str) or not isinstance(reason, str):
            return JSONResponse({"error": "'by' and 'reason' must be strings"}, 400)
        if decision is State.DENIED and not reason.strip():
            return JSONResponse({"error": "a denial needs a 'reason' (the model is told it)"}, 400)
        aid = request.path_params["approval_id"]
        done = await self._safely(lambda: self.store.decide(aid, decision, by, reason))
        if isinstance(done, Response):
            return done
        if done.taken:
            return JSONResponse({"id": aid, "state": decision.value, "by": by})
        if done.outcome == "unknown":
            return JSONResponse({"error": f"no approval {aid[:200]!r}"}, 404)
        return JSONResponse(
            {"error": f"already {done.outcome} (by {done.by})", "state": done.outcome}, 409
        )

    async def _safely(self, read: Callable[[], Any]) -> Any:
        try:
            return await run_in_threadpool(read)
        except redis.RedisError:
            return JSONResponse({"error": "toolfan cannot reach its Redis right now"}, 503)


async def _body(request: Request) -> dict[str, Any] | Response:
    """The decision's JSON object (empty when there is no body)."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            return JSONResponse({"error": "body too large"}, 413)
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return JSONResponse({"error": "the body is not JSON"}, 400)
    if not isinstance(value, dict):
        return JSONResponse({"error": "expected a JSON object"}, 400)
    return value
