"""Who may run what: a policy decides each call after its arguments validate, before it runs.

The model is an untrusted caller: listing a function and validating its arguments says
what may be called, not by whom or on what. A policy answers that per call::

    def policy(tool_name: str, args: dict, ctx: CallContext) -> Decision:
        if tool_name.startswith("delete_") and ctx.metadata.get("role") != "admin":
            return Deny("deleting needs an admin session")
        return Allow()

``@tool(authorize=policy)`` sets one tool's policy; ``TOOLFAN_POLICY=module:function`` sets
the one every other tool gets. A denied call is answered ``success: false`` with
``Not authorized: <reason>`` and never runs. A policy that raises, or answers anything but a
decision, denies: an authorization check that cannot decide must not let the call through.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from handlers.context import CallContext
from handlers.errors import RegistryError
from handlers.text import clip

log = logging.getLogger("toolfan.policy")

#: Characters of a denial's reason kept (it may be anything a policy wrote).
MAX_REASON_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Allow:
    """The call may run."""


@dataclass(frozen=True, slots=True)
class Deny:
    """The call may not run; ``reason`` is what the model is told (after "Not authorized: ")."""

    reason: str = "denied by policy"


@dataclass(frozen=True, slots=True)
class RequireApproval:
    """The call may run once a person approves it (``toolfan approvals``).

    ``reason`` is what the approver reads.
    """

    reason: str = "approval required by policy"


Decision: TypeAlias = Allow | Deny | RequireApproval
Policy: TypeAlias = Callable[[str, Mapping[str, Any], CallContext], Decision]


def decide(policy: Policy, tool_name: str, args: Mapping[str, Any], ctx: CallContext) -> Decision:
    """The policy's decision on one call; a policy that raises or answers nonsense denies."""
    try:
        decision = policy(tool_name, args, ctx)
    except Exception as exc:  # fail closed: a check that cannot decide denies
        log.error(
            "the authorization policy of %r raised %s; the call is denied",
            tool_name,
            type(exc).__name__,
            exc_info=True,
        )
        return Deny(f"the authorization policy failed ({type(exc).__name__})")
    if isinstance(decision, Allow):
        return decision
    if isinstance(decision, RequireApproval):
        reason = decision.reason if isinstance(decision.reason, str) else ""
        return RequireApproval(clip(reason, MAX_REASON_CHARS) or "approval required by policy")
    if isinstance(decision, Deny):
        reason = decision.reason if isinstance(decision.reason, str) else "denied by policy"
        return Deny(clip(reason, MAX_REASON_CHARS) or "denied by policy")
    log.error(
        "the authorization policy of %r answered %s, not a decision; the call is denied",
        tool_name,
        type(decision).__name__,
    )
    return Deny("the authorization policy gave no decision")


def load_policy(spec: str) -> Policy:
    """The function ``module:function`` names (``TOOLFAN_POLICY``).

    Raises:
        RegistryError: it cannot be imported, or is not callable.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise RegistryError(f"TOOLFAN_POLICY: expected module:function, got {spec!r}")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise RegistryError(f"TOOLFAN_POLICY: cannot load {spec!r}: {exc}") from exc
    if not callable(value):
        raise RegistryError(f"TOOLFAN_POLICY: {spec!r} is not callable")
    policy: Policy = value
    return policy
