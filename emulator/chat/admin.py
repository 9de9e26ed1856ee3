"""Admin routes of the scripted model under ``/_emulator/chat``: scripts, calls, faults.

They mirror ``EmulatorState.chat`` (``set_script``, ``scripts``, ``delete_script``,
``calls``, ``counts``, ``set_faults``) for a test or demo in another process. Like every
admin route they need no token and are never faulted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from emulator.admin import admin_body, admin_endpoint
from emulator.chat.faults import ChatFaults
from emulator.chat.state import ChatState
from emulator.jsontext import JsonResponse
from emulator.paths import RawRoute, query_items
from emulator.wire import JSON

Handler = Callable[[Request], Awaitable[Response]]
_SCRIPT_KEYS = frozenset({"name", "match", "steps"})
_FLAGS = {"1": True, "true": True, "0": False, "false": False}


def _flag(value: str | None, name: str) -> bool | None:
    if value is None:
        return None
    if value.lower() not in _FLAGS:
        raise ValueError(f"{name} must be 1/true or 0/false, got {value!r}")
    return _FLAGS[value.lower()]


def _counts_json(counts: dict[str, dict[int, int]]) -> JSON:
    """JSON keys are strings: ``{script: {"<step>": count}}``."""
    return {name: {str(step): n for step, n in steps.items()} for name, steps in counts.items()}


class ChatAdmin:
    """The ``/_emulator/chat`` endpoints over one :class:`ChatState`."""

    def __init__(self, chat: ChatState) -> None:
        self.chat = chat

    def routes(self, prefix: str = "/_emulator/chat") -> list[BaseRoute]:
        """The routes, under ``prefix``."""
        table: list[tuple[str, str, Handler]] = [
            ("/scripts", "POST", self.set_script),
            ("/scripts", "GET", self.list_scripts),
            ("/scripts/{name}", "GET", self.get_script),
            ("/scripts/{name}", "DELETE", self.delete_script),
            ("/calls", "GET", self.calls),
            ("/counts", "GET", self.counts),
            ("/faults", "GET", self.get_faults),
            ("/faults", "PUT", self.put_faults),
        ]
        return [
            RawRoute(prefix + path, admin_endpoint(handler), methods=[method])
            for path, method, handler in table
        ]

    async def set_script(self, request: Request) -> Response:
        """Set a script: ``{"name", "match" (null: the default), "steps": [...]}``; 201."""
        body = await admin_body(request)
        unknown = sorted(set(body) - _SCRIPT_KEYS)
        if unknown:
            raise ValueError(f"unknown keys {unknown}; known: {sorted(_SCRIPT_KEYS)}")
        script = self.chat.set_script(body.get("name"), body.get("steps", []), body.get("match"))
        return JsonResponse(script, status_code=201)

    async def list_scripts(self, request: Request) -> Response:
        """``{"data": [scripts], "default": name, "builtin": the built-in script}``."""
        return JsonResponse(self.chat.scripts())

    async def get_script(self, request: Request) -> Response:
        """One script; 404 when unknown."""
        return JsonResponse(self.chat.script(request.path_params["name"]))

    async def delete_script(self, request: Request) -> Response:
        """Forget a script; 404 when unknown."""
        name = request.path_params["name"]
        self.chat.delete_script(name)
        return JsonResponse({"deleted": name})

    async def calls(self, request: Request) -> Response:
        """Model calls, oldest first, and the answered counts per script and step.

        Filters: ``script``, ``refused`` (1/0), ``endpoint`` (``chat.completions`` or
        ``responses``); ``offset=N`` skips the first N calls that pass them.
        """
        params = dict(query_items(request.scope))
        offset = int(params.get("offset", "0"))
        if offset < 0:
            raise ValueError("offset must be >= 0")
        chosen = self.chat.calls(
            params.get("script"),
            refused=_flag(params.get("refused"), "refused"),
            endpoint=params.get("endpoint"),
        )
        counts = _counts_json(self.chat.counts(params.get("script")))
        return JsonResponse({"data": chosen[offset:], "counts": counts})

    async def counts(self, request: Request) -> Response:
        """``{"data": {script: {"<step>": answered calls}}}``, optionally of one ``script``."""
        params = dict(query_items(request.scope))
        return JsonResponse({"data": _counts_json(self.chat.counts(params.get("script")))})

    async def get_faults(self, request: Request) -> Response:
        """The chat fault knobs now (``fail_next``: the failures still to come)."""
        return JsonResponse(self.chat.faults.to_json())

    async def put_faults(self, request: Request) -> Response:
        """Replace the chat fault knobs (omitted ones go back to their defaults)."""
        faults = self.chat.set_faults(ChatFaults.from_json(await admin_body(request)))
        return JsonResponse(faults.to_json())
