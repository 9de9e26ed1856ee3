"""The subset of the Agents API's objects toolfan reads, parsed tolerantly.

Unknown fields are ignored, and a required action of any type other than
``function_call`` (approvals, environment connections, types invented next year) is kept
as an :class:`OpaqueAction` instead of failing the session: toolfan must leave those alone
and count them, never crash on them. A ``function_call`` too malformed to run becomes an
opaque entry with a ``problem``, so one bad entry cannot hide the session's other calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import quote_from_bytes

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, ValidationError

from handlers.jsonsafe import string_pairs

SessionStatus = Literal["idle", "in_progress", "requires_action", "failed"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _name(value: Any) -> Any:
    """A missing or non-string name is answered as an unknown function, not skipped."""
    return value if isinstance(value, str) else ""


class FunctionCall(_Model):
    """A ``function_call`` required action: the one kind toolfan answers.

    Only the ids are needed to answer a call, so only they are required: a call with an
    unusable name is still answered (with an "unknown function" error), so its turn can go on.
    """

    type: Literal["function_call"] = "function_call"
    turn_id: str = Field(min_length=1)
    call_id: str = Field(min_length=1)
    name: Annotated[str, BeforeValidator(_name)] = ""
    arguments: Any = None
    """The JSON value the model supplied (an object per the API), passed on unparsed."""


class OpaqueAction(_Model):
    """Any other required action, kept verbatim and never answered by toolfan.

    Attributes:
        type: The action's ``type`` as sent (``"<missing>"`` when absent).
        raw: The whole entry as received.
        problem: Why a ``function_call`` entry could not be read, else ``None``.
    """

    type: str
    raw: dict[str, Any]
    problem: str | None = None


RequiredAction = FunctionCall | OpaqueAction


def parse_action(value: Any) -> RequiredAction:
    """Read one ``required_actions`` entry, never raising.

    Read field by field rather than validated: an id may hold any character, lone
    surrogates included, which pydantic refuses as a string, and it must come back
    exactly as sent to answer the call.
    """
    if isinstance(value, FunctionCall | OpaqueAction):
        return value
    if not isinstance(value, dict):
        return _opaque("<invalid>", {"value": value}, "not a JSON object")
    kind = value.get("type")
    if kind != "function_call":
        return _opaque(kind if isinstance(kind, str) else "<missing>", value)
    bad = [k for k in ("turn_id", "call_id") if not isinstance(value.get(k), str) or not value[k]]
    if bad:
        problem = "; ".join(f"{k}: expected a non-empty string" for k in bad)
        return _opaque(kind, value, f"malformed function_call: {problem}")
    return FunctionCall.model_construct(
        type="function_call",
        turn_id=value["turn_id"],
        call_id=value["call_id"],
        name=_name(value.get("name")),
        arguments=value.get("arguments"),
    )


def _opaque(kind: str, raw: dict[str, Any], problem: str | None = None) -> OpaqueAction:
    return OpaqueAction.model_construct(type=kind, raw=raw, problem=problem)


class Agent(_Model):
    """The session's agent: its id and tool definitions."""

    id: str
    tools: list[dict[str, Any]] = []


class Session(_Model):
    """An ``agent.session``: its status and what it waits for.

    ``required_actions`` is the authority on pending work; the session's history is not
    read at all.
    """

    id: str = Field(min_length=1)
    object: str = "agent.session"
    status: SessionStatus | str
    required_actions: list[Annotated[RequiredAction, PlainValidator(parse_action)]] = []
    metadata: dict[str, str] = {}
    created_at: int = 0
    last_active_at: int | None = None
    agent: Agent | None = None
    error: str | None = None

    @property
    def function_calls(self) -> list[FunctionCall]:
        """The calls toolfan should run."""
        return [a for a in self.required_actions if isinstance(a, FunctionCall)]

    @property
    def other_actions(self) -> list[OpaqueAction]:
        """Everything toolfan leaves alone (and malformed calls, see ``problem``)."""
        return [a for a in self.required_actions if isinstance(a, OpaqueAction)]


class SessionPage(_Model):
    """One page of ``GET /agents/sessions``; items stay raw so each is parsed on its own."""

    data: list[Any]
    has_more: bool = False


@dataclass(frozen=True)
class BadSession:
    """A listed entry toolfan cannot read as a session: skipped alone, its neighbours kept.

    Attributes:
        id: The entry's id, when it had a usable one.
        problem: What is wrong with it, for one log line.
    """

    id: str | None
    problem: str


@dataclass(frozen=True)
class Glanced:
    """A listed session read only as far as its id and its calls' ids.

    A busy poller meets the sessions it dispatched itself again on every pass until their
    answers land; reading those ids is enough to see that nothing changed, so the full
    read (validation, argument limits) waits until the claim check says it is needed.
    """

    id: str
    calls: tuple[tuple[str, str], ...]
    raw: dict[str, Any]


def glance(raw: Any) -> Glanced | None:
    """The ids of a listed session whose every required action is a well-formed call.

    None for anything else (no usable id, another action type, a malformed or repeated
    call, no calls at all): such a session is read in full, as before.
    """
    if not isinstance(raw, dict):
        return None
    ident, actions = raw.get("id"), raw.get("required_actions")
    if not isinstance(ident, str) or not ident or not isinstance(actions, list) or not actions:
        return None
    calls = []
    for action in actions:
        if not isinstance(action, dict) or action.get("type") != "function_call":
            return None
        turn, call = action.get("turn_id"), action.get("call_id")
        if not isinstance(turn, str) or not isinstance(call, str) or not turn or not call:
            return None
        calls.append((turn, call))
    if len(set(calls)) != len(calls):
        return None
    return Glanced(ident, tuple(calls), raw)


#: Session ids no URL path can carry: a path segment "." or ".." is normalized away.
_DOT_SEGMENTS = frozenset({".", ".."})
#: Characters an id may take once percent-encoded in a URL: httpx (and with it the official
#: SDK) refuses URLs over 64 KiB, and proxies far less.
MAX_URL_ID_CHARS = 16_384
#: What the official SDK leaves unescaped in a path segment (RFC 3986 pchar).
PATH_SAFE = "!$&'()*+,;=:@"


def url_form(ident: str, safe: str = PATH_SAFE) -> str:
    """``ident`` percent-encoded as the official SDK does; lone surrogates as their bytes."""
    return quote_from_bytes(ident.encode("utf-8", "surrogatepass"), safe=safe)


def addressable(ident: str) -> bool:
    """Whether a request URL can carry ``ident`` (not a dot-segment, not too long)."""
    if ident in _DOT_SEGMENTS or not ident:
        return False
    return len(ident) * 12 <= MAX_URL_ID_CHARS or len(url_form(ident)) <= MAX_URL_ID_CHARS


def parse_session(raw: Any) -> Session | BadSession:
    """Read one listed session, never raising.

    Only the id and ``required_actions`` decide what toolfan does, so only a problem with
    them costs the session; any other unreadable field (a non-string metadata value, a
    5,000-digit timestamp) falls back to its default, and each required action is read on
    its own (see :func:`parse_action`).
    """
    if not isinstance(raw, dict):
        return BadSession(None, "not a JSON object")
    try:  # the common case, at pydantic's speed; anything odd is read field by field
        session = Session.model_validate(raw)
    except ValidationError:
        return _tolerant_session(raw)
    if not addressable(session.id):
        return BadSession(session.id, "an id that no request URL can carry")
    return session


def _tolerant_session(raw: dict[str, Any]) -> Session | BadSession:
    ident = raw.get("id")
    if not isinstance(ident, str) or not ident:
        return BadSession(None, "no usable id")
    if not addressable(ident):
        return BadSession(ident, "an id that no request URL can carry")
    actions = raw.get("required_actions")
    if actions is not None and not isinstance(actions, list):
        return BadSession(ident, "required_actions is not an array")
    return Session.model_construct(
        id=ident,
        object="agent.session",
        status=_or(raw.get("status"), str, ""),
        required_actions=[parse_action(a) for a in actions or []],
        metadata=_metadata(raw.get("metadata")),
        created_at=_or(raw.get("created_at"), int, 0),
        last_active_at=_or(raw.get("last_active_at"), int, None),
        agent=_agent(raw.get("agent")),
        error=_or(raw.get("error"), str, None),
    )


def _or(value: Any, kind: type, default: Any) -> Any:
    """``value`` when it has the type (bools are not ints here), else ``default``."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    return default


def _metadata(value: Any) -> dict[str, str]:
    return string_pairs(value)


def _agent(value: Any) -> Agent | None:
    try:
        return Agent.model_validate(value) if isinstance(value, dict) else None
    except ValidationError:
        return None


def tool_result_event(
    turn_id: str,
    call_id: str,
    *,
    success: bool,
    output: str | list[dict[str, Any]] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """One ``agent.session.input.tool_result`` event: ``output`` on success, else ``error``."""
    event: dict[str, Any] = {
        "type": "agent.session.input.tool_result",
        "turn_id": turn_id,
        "call_id": call_id,
        "success": success,
    }
    if success:
        event["output"] = output if output is not None else ""
    else:
        event["error"] = error or "The function failed."
    return event
