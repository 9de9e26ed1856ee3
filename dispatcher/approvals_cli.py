"""``toolfan approvals``: the inbox of calls waiting for a person, from the terminal.

* ``toolfan approvals list [--json]``: the pending calls, the nearest deadline first;
* ``toolfan approvals show ID``: one approval, request and decision, as JSON;
* ``toolfan approvals approve ID [--by NAME] [--reason TEXT]``;
* ``toolfan approvals deny ID --reason TEXT``.

A decision is taken once: a second one (or one past the deadline) is refused, naming the
decision that counts. Imports stay inside the functions: the parser is built before a
gevent worker patches.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from typing import Any


def add_approvals(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``toolfan approvals``."""
    p = sub.add_parser(
        "approvals",
        help="list, show, approve or deny the calls waiting for a person's approval",
        description="Calls of tools with requires_approval=True (or a policy's "
        "RequireApproval) wait here until approved, denied or past their deadline "
        "(TOOLFAN_APPROVAL_TIMEOUT). An approved call runs once, with the arguments shown.",
    )
    p.add_argument("action", choices=["list", "show", "approve", "deny"])
    p.add_argument("id", nargs="?", metavar="ID", help="show, approve, deny: the approval")
    p.add_argument("--json", action="store_true", help="list: one JSON object per line")
    p.add_argument("--by", default=None, help="approve, deny: who decides (default: $USER)")
    p.add_argument("--reason", default="", help="approve: optional; deny: required")
    p.set_defaults(command=cmd_approvals, passthrough=False)


def cmd_approvals(args: argparse.Namespace, rest: list[str]) -> int:
    """Run the chosen action."""
    from tasks.runtime import get_approvals

    store = get_approvals()
    if args.action == "list":
        return _list(store, args.json)
    if not args.id:
        return _fail(f"approvals {args.action} needs the approval's ID (see 'approvals list')")
    if args.action == "show":
        approval = store.get(args.id)
        if approval is None:
            return _fail(f"no approval {args.id!r}")
        print(json.dumps(approval.to_json(), indent=2))  # escaped: no control bytes
        return 0
    if args.action == "deny" and not args.reason.strip():
        return _fail("approvals deny needs --reason (the model is told it)")
    return _decide(store, args)


def _list(store: Any, as_json: bool) -> int:
    pending = store.pending()
    if as_json:
        for approval in pending:
            print(json.dumps(approval.to_json()))
        return 0
    if not pending:
        print("no calls are waiting for approval")
        return 0
    now = time.time()
    for a in pending:
        age, left = now - a.asked_at, a.seconds_left(now)
        print(
            f"{a.id}  {a.function}({_short(a.arguments)})  {a.source} {_short(a.batch_id, 40)}"
            f"  asked {age:.0f} s ago, {left:.0f} s left  ({_short(a.reason, 80)})"
        )
    return 0


def _decide(store: Any, args: argparse.Namespace) -> int:
    from tasks.approvals import State

    decision = State.APPROVED if args.action == "approve" else State.DENIED
    by = args.by or getpass.getuser() or "cli"
    done = store.decide(args.id, decision, by, args.reason)
    if done.taken:
        print(f"{args.id} {decision.value} by {by}")
        return 0
    if done.outcome == "unknown":
        return _fail(f"no approval {args.id!r}")
    if done.outcome == "timed_out":
        return _fail(f"{args.id} timed out before this decision; the call was not run")
    return _fail(f"{args.id} was {done.outcome} already (by {done.by}); nothing changed")


def _short(text: str, limit: int = 60) -> str:
    """One line of at most ``limit`` characters, control characters escaped.

    Arguments come from the model: an escape sequence in them must not reach the
    operator's terminal as one.
    """
    one_line = " ".join(str(text).split())
    cut = one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in cut)


def _fail(message: str) -> int:
    print(f"toolfan: {message}", file=sys.stderr)
    return 2
