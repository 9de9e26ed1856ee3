"""``toolfan webhook``: serve the intake, and manage the platform's webhook endpoints.

* ``toolfan webhook [--host 127.0.0.1] [--port 8088] [--root-path /PREFIX]`` serves the
  intake (uvicorn), and the approval page at ``/approvals``;
* ``toolfan webhook register URL [--event TYPE ...] [--name NAME]`` creates the endpoint
  through the API and prints its id and signing secret, once (the API shows it only then);
* ``toolfan webhook list`` and ``toolfan webhook delete ID``.

Endpoints are managed with the official SDK (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``).
Imports stay inside the functions: the parser is built before a gevent worker patches.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dispatcher.arguments import port

DEFAULT_EVENTS = ("agent.session.action_required",)


def add_webhook(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``toolfan webhook``."""
    p = sub.add_parser(
        "webhook",
        help="serve the signed webhook intake, or register/list/delete the API's endpoints",
        description="'toolfan webhook' serves POST /webhooks/openai (signed with "
        "OPENAI_WEBHOOK_SECRET), POST /runs/watch, the approvals (a page for browsers at "
        "/approvals, JSON for others), GET /healthz and GET /metrics; put it behind TLS. "
        "'register URL' creates the endpoint and prints its signing secret once; 'list' and "
        "'delete ID' complete it.",
    )
    p.add_argument(
        "action", nargs="?", default="serve", choices=["serve", "register", "list", "delete"]
    )
    p.add_argument(
        "target", nargs="?", metavar="URL_OR_ID", help="register: the URL; delete: the id"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8088, help="port to listen on (8088; 0: any free)")
    p.add_argument(
        "--root-path",
        default="",
        metavar="PREFIX",
        help="the path prefix a reverse proxy serves the intake under (the page's links)",
    )
    p.add_argument("--event", action="append", dest="events", metavar="TYPE", help="repeatable")
    p.add_argument("--name", default="toolfan")
    p.set_defaults(command=cmd_webhook, passthrough=False)


def cmd_webhook(args: argparse.Namespace, rest: list[str]) -> int:
    """Run the chosen action."""
    if args.action == "serve":
        return _serve(args.host, args.port, args.root_path)
    import openai

    try:
        return _manage(args)
    except openai.OpenAIError as exc:
        print(f"toolfan: webhook {args.action}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def _manage(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list()
    if not args.target:
        print(
            f"toolfan: webhook {args.action} needs "
            + ("the endpoint's URL" if args.action == "register" else "the endpoint's id"),
            file=sys.stderr,
        )
        return 2
    if args.action == "register":
        return _register(args.target, args.events or list(DEFAULT_EVENTS), args.name)
    return _delete(args.target)


#: Seconds the intake keeps an idle connection open. Longer than senders' pools keep theirs
#: (httpx 5 s, aiohttp 15 s, load balancers commonly 60 s): a server that closes first races
#: a delivery sent on the connection as it closes, and that delivery is lost to a reset and
#: waits for the platform's retry. uvicorn's default is 5 s, httpx's pool expiry too; at
#: those a soak saw one attempt of 30,802 fail unanswered without reaching the intake.
KEEP_ALIVE = 75


def _serve(host: str, port: int, root_path: str = "") -> int:
    import logging

    import uvicorn

    from dispatcher.warm import warm_intake
    from dispatcher.webhook.app import build_app, config_from_env
    from dispatcher.webhook.deadline import IntakeProtocol
    from dispatcher.webhook.verify import SECRET_VARIABLE, unusable
    from tasks.logs import structured
    from tasks.settings import get_settings

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    structured(logging.getLogger(), get_settings().max_log_chars)  # as workers and poller
    config = config_from_env()
    bad = unusable(config.secrets)
    if bad:
        which = ", ".join(str(at) for at in bad)
        print(
            f"toolfan: webhook: cannot start: {SECRET_VARIABLE}: secret {which} of "
            f"{len(config.secrets)} starts with whsec_ but the rest is not base64 (copy "
            "the whole secret the platform showed)",
            file=sys.stderr,
        )
        return 2
    if not config.secrets:
        print(
            f"toolfan: warning: {SECRET_VARIABLE} is not set: every delivery is refused (401)",
            file=sys.stderr,
        )
    warm_intake(config.client.ping)
    try:
        sock = _listen(host, port)
    except OSError as exc:
        print(f"toolfan: webhook: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    shown = f"[{host}]" if ":" in host else host
    print(f"webhook intake listening on http://{shown}:{port}/webhooks/openai", flush=True)
    if config.token:
        print(f"approval page on http://{shown}:{port}/approvals", flush=True)
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(config),
            root_path=root_path,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=KEEP_ALIVE,
            http=IntakeProtocol,  # each request's arrival has a deadline (slow clients)
            ws="none",  # the intake serves no WebSocket: an upgrade is not taken
        )
    )
    server.run(sockets=[sock])
    return 0


def _listen(host: str, port: int) -> Any:
    """The intake's listening socket, bound before the "listening" line is printed.

    A supervisor, a readiness check or a test that sees the line may connect at once: the
    kernel queues the connection until uvicorn accepts it, where a socket uvicorn bound
    itself would not exist yet and the connection would be refused.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets whose proto
    # says TCP, and without it each answer would wait for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _client() -> Any:
    import openai

    return openai.OpenAI(max_retries=2)


def _register(url: str, events: list[str], name: str) -> int:
    endpoint = _client().webhooks.create(url=url, event_types=events, name=name)
    print(f"webhook endpoint {endpoint.id} for {endpoint.url} ({', '.join(endpoint.event_types)})")
    print(
        f"signing secret (shown once; set it as OPENAI_WEBHOOK_SECRET): {endpoint.signing_secret}"
    )
    return 0


def _list() -> int:
    for endpoint in _client().webhooks.list():
        fields = ("id", "url", "name", "event_types", "signing_secret_hint", "created_at")
        print(json.dumps({k: getattr(endpoint, k, None) for k in fields}))
    return 0


def _delete(endpoint_id: str) -> int:
    deleted = _client().webhooks.delete(endpoint_id)
    print(
        f"webhook endpoint {endpoint_id} deleted"
        if getattr(deleted, "deleted", True)
        else f"webhook endpoint {endpoint_id} not deleted"
    )
    return 0
