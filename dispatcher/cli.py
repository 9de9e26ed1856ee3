"""The ``toolfan`` command line: one sub-command per job, each a small function.

Every sub-command loads the tool modules named by ``TOOLFAN_HANDLERS`` first (through the
settings), so the worker, the poller and the CLI all agree on which functions exist.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence

from dispatcher.approvals_cli import add_approvals
from dispatcher.arguments import count, port, seconds
from dispatcher.conversations.cli import add_chat
from dispatcher.webhook.cli import add_webhook
from handlers.errors import ToolfanError

Command = Callable[[argparse.Namespace, list[str]], int]


def _cmd_tools(args: argparse.Namespace, rest: list[str]) -> int:
    """Print the tool definitions of every registered function for one API."""
    from handlers.definitions import tool_definitions
    from tasks.settings import load_registry

    definitions = tool_definitions(args.api, load_registry())
    print(json.dumps(definitions, indent=None if args.compact else 2))
    return 0


def _cmd_worker(args: argparse.Namespace, rest: list[str]) -> int:
    """Start a Celery worker; extra options go to ``celery worker`` unchanged."""
    _fresh_metrics_dir()
    from celery import maybe_patch_concurrency

    maybe_patch_concurrency(["celery", "worker", *rest])  # gevent/eventlet: before any import
    from dispatcher.check import check_settings, refusal

    loaded = check_settings()  # first: a bad setting fails the import of the Celery app
    if refusal(loaded) is not None:
        print(refusal(loaded), file=sys.stderr, flush=True)
        return 2
    from tasks.worker import run_worker, serves_control_queues

    # Only a worker on toolfan.submit or toolfan.poll talks to the API.
    if not _preflight(api=serves_control_queues(rest)):
        return 2
    return run_worker(rest)


def _preflight(*, api: bool, warn: bool = True) -> bool:
    """Run the configuration checks; False (after one line on stderr) if one is fatal.

    ``warn=False`` keeps a passing start silent about an API that did not answer: a
    ``poll --once`` pass reports that itself, in its one line for cron.
    """
    from dispatcher.check import refusal, run_checks

    findings = run_checks(api=api)
    for finding in findings:
        if warn and not finding.ok and not finding.fatal:
            print(f"toolfan: warning: {finding.message}", file=sys.stderr, flush=True)
    refused = refusal(findings)
    if refused is not None:
        print(refused, file=sys.stderr, flush=True)
        return False
    return True


def _cmd_check(args: argparse.Namespace, rest: list[str]) -> int:
    """Check the settings, Redis, the broker and the API; exit 2 if a setting is wrong."""
    from dispatcher.check import refusal, run_checks

    findings = run_checks(api=not args.no_api)
    for finding in findings:
        print(finding.line())
    refused = refusal(findings)
    if refused is not None:
        print(refused, file=sys.stderr)
        return 2
    print("toolfan: configuration ok")
    return 0


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="check settings, Redis, the broker and one authenticated API request",
        description="What toolfan worker and toolfan poll check before they start. Exits 2 "
        "with one line naming the setting when something is misconfigured.",
    )
    p.add_argument("--no-api", action="store_true", help="skip the API request")
    p.set_defaults(command=_cmd_check, passthrough=False)


def _cmd_resubmit(args: argparse.Namespace, rest: list[str]) -> int:
    """Send the saved results of sessions again (after an operator fixed the cause)."""
    from dispatcher.poll import process_poller
    from dispatcher.resubmit import abandoned_sessions, resubmit_session

    if not _preflight(api=True):
        return 2
    poller = process_poller()
    sessions = list(args.batch) or []
    if args.abandoned:
        sessions += [s for s in abandoned_sessions(poller.ledger) if s not in sessions]
    if not sessions:
        print("resubmit: no session to resubmit", file=sys.stderr)
        return 1
    for session_id in sessions:
        print(resubmit_session(session_id, poller, poller.client.retrieve_session).line())
    return 0


def _add_resubmit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "resubmit",
        help="send a session's saved results again, e.g. after fixing a setting",
        description="Reads each session from the API, reopens the abandoned or submitted "
        "calls it still waits for (their saved results are kept) and dispatches it as a "
        "poll would: nothing runs twice.",
    )
    p.add_argument("batch", nargs="*", metavar="BATCH", help="session ids")
    p.add_argument("--abandoned", action="store_true", help="every session with an abandoned call")
    p.set_defaults(command=_cmd_resubmit, passthrough=False)


def _fresh_metrics_dir() -> None:
    """Empty ``PROMETHEUS_MULTIPROC_DIR`` before any metric exists in this process tree.

    Samples of a previous run's processes would otherwise be summed into this run's.
    """
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory, exist_ok=True)


def _cmd_poll(args: argparse.Namespace, rest: list[str]) -> int:
    """Poll once (cron) or in a loop until SIGTERM."""
    if not _preflight(api=True, warn=args.interval is not None):
        return 2
    from dispatcher.loop import run_loop, run_once
    from tasks import metrics
    from tasks.logs import structured
    from tasks.settings import get_settings

    def emit(line: str) -> None:
        print(line, flush=True)

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    structured(logging.getLogger(), get_settings().max_log_chars)
    if args.interval is not None:
        port = metrics.port_from_env()
        if port is not None:
            _serve_metrics(port)
        return run_loop(args.interval, emit)
    return run_once(emit)


def _serve_metrics(port: int) -> None:
    """The poller's ``/metrics``; a port that cannot be served refuses the start by name.

    Raises:
        SettingsError: the port is taken or not ours to bind (one line, not a traceback).
    """
    from tasks import metrics
    from tasks.settings import SettingsError

    try:
        metrics.serve(port)
    except OSError as exc:
        raise SettingsError(
            f"TOOLFAN_METRICS_PORT={port}: no metrics endpoint: {exc.strerror or exc}"
        ) from exc


def _celery(subcommand: str) -> Command:
    """A command running ``celery <subcommand>`` on toolfan's app; options pass through.

    Flower registers itself as a Celery sub-command, so beat and flower both find the same
    broker, backend and queues as the workers this way.
    """

    def run(args: argparse.Namespace, rest: list[str]) -> int:
        from tasks.app import app

        app.start(argv=[subcommand, *rest])
        return 0

    return run


def _add_beat(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "beat",
        help="run Celery beat: a toolfan.poll task every TOOLFAN_POLL_INTERVAL seconds",
        description="Further options go to 'celery beat' (e.g. -s /var/lib/toolfan/schedule). "
        "Run exactly one beat per fleet.",
        add_help=False,
    )
    p.set_defaults(command=_celery("beat"), passthrough=True)


def _add_flower(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "flower",
        help="run Flower, the web monitor: every execute with its function, session and call",
        description="Further options go to 'celery flower' (e.g. --port=5555 "
        "--basic-auth=user:pass). Workers send task events, so Flower sees every task.",
        add_help=False,
    )
    p.set_defaults(command=_celery("flower"), passthrough=True)


def _cmd_demo(args: argparse.Namespace, rest: list[str]) -> int:
    """Run the local end-to-end demo."""
    from dispatcher.demo import run_demo
    from dispatcher.devstack import until_stopped

    return until_stopped("demo", lambda: run_demo(args.sessions, args.timeout, args.runs))


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="start Redis, the emulator, a worker and a poller; answer seeded sessions and runs",
    )
    p.add_argument("--sessions", type=count, default=50, help="sessions to seed (50)")
    p.add_argument("--runs", type=count, default=10, help="Assistants runs to start (10)")
    p.add_argument("--timeout", type=seconds, default=90.0, help="seconds to wait for answers")
    p.set_defaults(command=_cmd_demo, passthrough=False)


def _cmd_inspect(args: argparse.Namespace, rest: list[str]) -> int:
    """Print the ledger's view of one session, or of one conversation, as JSON."""
    from dispatcher.conversations.cli import conversation_view
    from dispatcher.sources.agents import SOURCE
    from tasks.report import inspect_session
    from tasks.runtime import get_ledger

    conversation = conversation_view(args.session_id)
    if conversation is not None:
        print(json.dumps(conversation, indent=2))
        return 0
    view = inspect_session(get_ledger(SOURCE.name), args.session_id)
    print(json.dumps(view, indent=2))
    return 0 if view["calls"] or view["dispatch"] else 1


def _cmd_status(args: argparse.Namespace, rest: list[str]) -> int:
    """Print fleet-wide counts from the ledger."""
    from dispatcher.sources.agents import SOURCE
    from tasks.runtime import get_ledger

    AGENTS = SOURCE.name
    from tasks.report import fleet_status
    from tasks.settings import get_settings

    settings = get_settings()
    for line in fleet_status(
        get_ledger(AGENTS), settings.queue_budget, settings.dead_after
    ).lines():
        print(line)
    return 0


def _add_inspect(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "inspect",
        help="the ledger's view of one session (calls, states, results, submission), or of "
        "one conversation of the tool loop (steps, model calls, tool calls)",
    )
    p.add_argument("session_id", metavar="ID", help="a session id or a conversation id")
    p.set_defaults(command=_cmd_inspect, passthrough=False)


def _add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("status", help="counts of in-flight, submitted, abandoned calls, claims")
    p.set_defaults(command=_cmd_status, passthrough=False)


def _add_poll(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "poll", help="find waiting sessions (and watched runs) and dispatch their calls"
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="one pass, for cron (exit 1 on failure)")
    mode.add_argument(
        "--interval", type=seconds, metavar="SECONDS", help="poll in a loop until SIGTERM or Ctrl-C"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log each dispatch and retry")
    p.set_defaults(command=_cmd_poll, passthrough=False)


def _add_tools(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from handlers.definitions import Api

    p = sub.add_parser(
        "tools",
        help="print the tool definitions of the registered tools (agent.tools by default)",
        description="--api agents prints the agent.tools array; responses, chat and "
        "assistants print those APIs' strict function tools (every property required, "
        "those with a default nullable).",
    )
    p.add_argument(
        "--api",
        choices=[a.value for a in Api],
        default=Api.AGENTS.value,
        help="the API whose tool form to print (agents)",
    )
    p.add_argument("--compact", action="store_true", help="one line instead of indented JSON")
    p.set_defaults(command=_cmd_tools, passthrough=False)


def _add_worker(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "worker",
        help="start a Celery worker on every function queue plus the control queues",
        description="Further options go to 'celery worker' (e.g. -Q fn.add -c 4 -P threads).",
        add_help=False,
    )
    p.set_defaults(command=_cmd_worker, passthrough=True)


def _cmd_emulator(args: argparse.Namespace, rest: list[str]) -> int:
    """Serve the local Agents API emulator until interrupted."""
    from emulator.server import serve

    serve(args.host, args.port, api_key=args.api_key, log_level=args.log_level)
    return 0


def _add_emulator(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "emulator",
        help="serve a local stand-in of the Agents API sessions endpoints (see emulator/README.md)",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (127.0.0.1)")
    p.add_argument("--port", type=port, default=8765, help="port to listen on (8765; 0: any free)")
    p.add_argument("--api-key", default=None, help="the only bearer token accepted (default: any)")
    p.add_argument("--log-level", default="info", help="uvicorn log level (info)")
    p.set_defaults(command=_cmd_emulator, passthrough=False)


def _cmd_runs(args: argparse.Namespace, rest: list[str]) -> int:
    """Watch runs of the Assistants protocol, or list the watched ones."""
    from dispatcher.sources.assistants import NAME
    from dispatcher.sources.assistants_watch import Watches
    from tasks.runtime import get_ledger

    watches = Watches(get_ledger(NAME).client)
    if args.action == "watch":
        ids = list(args.ids)
        if not ids or len(ids) % 2:
            print("toolfan: runs watch takes THREAD_ID RUN_ID pairs", file=sys.stderr)
            return 2
        pairs = list(zip(ids[::2], ids[1::2], strict=True))
        try:
            added = watches.add(pairs)
        except ValueError as exc:
            print(f"toolfan: {exc}", file=sys.stderr)
            return 2
        print(f"watching {len(pairs)} run(s), {added} new; {len(watches)} watched in all")
        if "assistants" not in _sources():
            print(
                "toolfan: warning: TOOLFAN_SOURCES does not include assistants: no poller "
                "started this way reads these runs",
                file=sys.stderr,
            )
        return 0
    if args.ids:
        print("toolfan: runs list takes no arguments", file=sys.stderr)
        return 2
    for watch in watches.all():
        status = watch.status or "not read yet"
        print(json.dumps({"thread_id": watch.thread_id, "run_id": watch.run_id, "status": status}))
    return 0


def _sources() -> tuple[str, ...]:
    from tasks.settings import get_settings

    return get_settings().sources


def _add_runs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "runs",
        help="watch Assistants runs (OpenAI, Azure OpenAI, Azure AI Foundry) until they are over",
        description="'runs watch THREAD_ID RUN_ID [THREAD_ID RUN_ID ...]' hands runs to the "
        "pollers of TOOLFAN_SOURCES=assistants, which answer each requires_action phase once "
        "and stop watching a run once it is over or past its expires_at. 'runs list' prints "
        "the watched runs, one JSON object per line.",
    )
    p.add_argument("action", choices=["watch", "list"])
    p.add_argument("ids", nargs="*", metavar="ID")
    p.set_defaults(command=_cmd_runs, passthrough=False)


_PARSERS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_tools,
    _add_worker,
    _add_poll,
    _add_beat,
    _add_flower,
    _add_demo,
    _add_inspect,
    _add_status,
    _add_check,
    _add_resubmit,
    _add_runs,
    add_chat,
    add_approvals,
    add_webhook,
    _add_emulator,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="toolfan",
        description="Run the function calls of AI agents on a Celery worker fleet: one task "
        "per call on a queue per function, each batch's results delivered once.",
    )
    sub = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")
    for add in _PARSERS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolfan`` console script."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not args.passthrough:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    command: Command = args.command
    try:
        return command(args, rest)
    except Exception as exc:
        if not _clean_failure(exc):
            raise
        print(f"toolfan: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def _clean_failure(exc: Exception) -> bool:
    """Failures worth one line, not a traceback: toolfan's own, Redis's, the broker's.

    Imported here, not at the top: ``toolfan worker -P gevent`` must patch the standard
    library before anything opens sockets or threads.
    """
    import redis
    from kombu.exceptions import OperationalError

    return isinstance(exc, ToolfanError | redis.RedisError | OperationalError)


if __name__ == "__main__":
    sys.exit(main())
