"""Authorization policies the tests name in ``TOOLFAN_POLICY`` (and pass as ``authorize=``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handlers import Allow, CallContext, Deny, RequireApproval

#: Not a policy: ``TOOLFAN_POLICY`` naming it must stop the start.
NOT_CALLABLE = 42


def deny_deletes(tool_name: str, args: Mapping[str, Any], ctx: CallContext) -> Allow | Deny:
    """Deny every ``delete_*`` function unless the session's metadata says ``role=admin``."""
    if tool_name.startswith("delete_") and ctx.metadata.get("role") != "admin":
        return Deny(f"{tool_name} needs an admin session")
    return Allow()


def allow_everything(tool_name: str, args: Mapping[str, Any], ctx: CallContext) -> Allow:
    """A tool's own policy, which wins over ``TOOLFAN_POLICY``."""
    return Allow()


def broken(tool_name: str, args: Mapping[str, Any], ctx: CallContext) -> Allow:
    """A policy with a bug: it raises, so its calls are denied."""
    raise KeyError("role")


def approve_large(
    tool_name: str, args: Mapping[str, Any], ctx: CallContext
) -> Allow | RequireApproval:
    """Amounts above 100 need a person's approval."""
    if args["amount"] > 100:
        return RequireApproval(f"a transfer of {args['amount']}")
    return Allow()
