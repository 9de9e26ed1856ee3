"""``toolfan chat`` (a tool loop from the shell) and the conversation view of ``inspect``.

Imports of the engine stay inside the functions: the ``toolfan`` parser is built before
``toolfan worker -P gevent`` patches the standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from dispatcher.arguments import seconds

#: Seconds between looks for new steps while a conversation runs.
PROGRESS_EVERY = 0.5
#: Seconds without a first step after which the command says what it waits for.
SILENT_HINT = 15.0
NO_STEP_YET = (
    "still waiting for the first model step of {cid}: is a worker consuming toolfan.model "
    "(toolfan worker serves it by default), and can it reach the model?"
)


def add_chat(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``toolfan chat``."""
    from dispatcher.conversations.spec import DEFAULT_MAX_STEPS

    p = sub.add_parser(
        "chat",
        help="run a tool loop on the fleet: the model, its tool calls, until it answers",
        description="Starts a durable conversation (model steps on toolfan.model, tool calls "
        "on their queues), prints each step as it is saved, then the answer. Needs running "
        "workers, and the model's variables (OPENAI_API_KEY, or AZURE_OPENAI_*).",
    )
    p.add_argument("prompt")
    p.add_argument("--api", choices=["chat", "responses"], default="chat")
    p.add_argument("--model", default=None, help="default: TOOLFAN_MODEL")
    p.add_argument("--instructions", default=None)
    p.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS)
    p.add_argument("--timeout", type=seconds, default=300.0, help="seconds to wait for the end")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(command=cmd_chat, passthrough=False)


def cmd_chat(args: argparse.Namespace, rest: list[str]) -> int:
    """Run one conversation and print its steps and answer; 0 once it completed."""
    from dispatcher.conversations.spec import ConversationError
    from toolfan.conversations import conversation_result, start_conversation

    try:
        cid = start_conversation(
            api=args.api,
            model=args.model,
            input=args.prompt,
            instructions=args.instructions,
            max_steps=args.max_steps,
        )
    except ConversationError as exc:
        print(f"toolfan: {exc}", file=sys.stderr)
        return 2
    shown, started = 0, time.monotonic()
    deadline, hinted = started + args.timeout, False
    while True:
        left = deadline - time.monotonic()
        result = conversation_result(cid, timeout=max(0.0, min(PROGRESS_EVERY, left)))
        if not args.json:
            shown = _print_steps(result.steps, shown, final=result.done)
        if not result.steps and not hinted and time.monotonic() - started > SILENT_HINT:
            print(NO_STEP_YET.format(cid=cid), file=sys.stderr)
            hinted = True
        if result.done or left <= 0:
            break
    if args.json:
        print(json.dumps(result.__dict__, indent=2, default=str))
    else:
        _print_end(result.conversation_id, result.status, result.reason, result.text)
    return 0 if result.status == "completed" else 1


def _print_steps(steps: list[dict[str, Any]], shown: int, *, final: bool) -> int:
    """Print the steps not printed yet whose tools have all answered; how many are shown."""
    for step in steps[shown:]:
        calls = step["tool_calls"]
        if any(c["output"] is None for c in calls) and not final:
            break
        for call in calls:
            print(
                f"step {step['step']}: {call['name']}({_short(call['arguments'])}) -> "
                f"{_short(call['output'])}",
                file=sys.stderr,
            )
        shown += 1
    return shown


def _print_end(cid: str, status: str, reason: str, text: str) -> None:
    if text:
        print(text)
    detail = f": {reason}" if reason else ""
    print(f"[{status}{detail}] conversation {cid}", file=sys.stderr)


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def conversation_view(conversation_id: str) -> dict[str, Any] | None:
    """What ``toolfan inspect`` shows of a conversation, or None if there is none."""
    from dispatcher.conversations.step import batch_of, get_store
    from dispatcher.sources.inline import NAME
    from tasks.report import inspect_session
    from tasks.runtime import get_ledger
    from toolfan.conversations import conversation_result

    store = get_store()
    conversation = store.load(conversation_id)
    if conversation is None:
        return None
    result = conversation_result(conversation_id, timeout=0)
    steps = []
    for step in result.steps:
        batch = batch_of(conversation, step["step"]) if step["tool_calls"] else None
        ledger = inspect_session(get_ledger(NAME), batch.batch_id) if batch else None
        steps.append({**step, "batch": ledger})
    spec = conversation.spec
    return {
        "conversation_id": conversation_id,
        "status": result.status,
        "reason": result.reason,
        "text": result.text,
        "api": spec.api.value,
        "model": spec.model,
        "max_steps": spec.max_steps,
        "created_at": spec.created_at,
        "steps": steps,
    }
