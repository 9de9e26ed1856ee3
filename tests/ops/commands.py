"""Check that a deployment file's command line is a real ``toolfan`` command.

Each command is parsed by the parser that will really read it: toolfan's own argparse for
its sub-commands, Celery's click commands for the options ``worker`` and ``beat`` pass on,
and Flower's option table for ``flower``. A typo in an ops file then fails here rather
than on a production host.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from dispatcher.cli import build_parser
from tests.services import ROOT

#: toolfan's own queues, which the default worker group must consume.
CONTROL_QUEUES = frozenset({"toolfan.submit", "toolfan.poll", "toolfan.model"})


@dataclass
class Command:
    """A parsed ``toolfan`` command line."""

    name: str
    argv: list[str]
    options: dict[str, Any] = field(default_factory=dict)

    def gives(self, *flags: str) -> bool:
        """Whether the command line sets one of ``flags`` itself (not a default)."""
        return any(a in flags or a.startswith(tuple(f + "=" for f in flags)) for a in self.argv)

    @property
    def queues(self) -> list[str]:
        """The ``-Q`` queues of a worker command (empty: every queue)."""
        return list(self.options.get("queues") or [])


def parse(argv: list[str]) -> Command:
    """Parse ``argv`` (starting with ``toolfan``); AssertionError naming the problem."""
    assert argv and argv[0] == "toolfan", f"not a toolfan command: {argv}"
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args, rest = build_parser().parse_known_args(argv[1:])
    except SystemExit:
        raise AssertionError(f"{argv}: {stderr.getvalue().strip()}") from None
    name = argv[1]
    if not args.passthrough:
        assert not rest, f"{argv}: unknown options {rest}"
        return Command(name, argv, vars(args))
    checkers = {"worker": _celery_options, "beat": _celery_options, "flower": _flower_options}
    return Command(name, argv, checkers[name](name, rest))


def _celery_options(name: str, rest: list[str]) -> dict[str, Any]:
    """The options of ``celery worker`` / ``celery beat`` as Celery's click parser reads them."""
    from celery import Celery
    from celery.bin.base import CLIContext
    from celery.bin.beat import beat
    from celery.bin.worker import worker

    command = {"worker": worker, "beat": beat}[name]
    obj = CLIContext(app=Celery(set_as_current=False), no_color=True, workdir=None, quiet=True)
    try:
        return dict(command.make_context(name, list(rest), obj=obj).params)
    except click.ClickException as exc:
        raise AssertionError(f"celery {name} {rest}: {exc.format_message()}") from None


def _flower_options(name: str, rest: list[str]) -> dict[str, Any]:
    """Flower's options are tornado options: ``--name=value``, dashes or underscores."""
    from flower.options import options as flower_options

    known = set(flower_options._options)
    parsed: dict[str, Any] = {}
    for item in rest:
        match = re.fullmatch(r"--([a-z_-]+)(?:=(.*))?", item)
        assert match, f"flower option {item!r} is not --name=value"
        key = match[1].replace("_", "-")
        assert key in known, f"flower has no option --{key}"
        parsed[key] = match[2]
    return parsed


def example_queues() -> set[str]:
    """Every queue a fleet running only ``handlers.examples`` must consume.

    Built from a fresh registry of the example module's tools, since the test session's
    registry also holds the test tools. ``tasks`` is imported here, not at module level:
    importing it reads the environment, which ``tests/conftest.py`` sets first.
    """
    import handlers.examples
    from handlers import Registry, Tool
    from tasks.queues import all_queues

    registry = Registry()
    for value in vars(handlers.examples).values():
        if isinstance(value, Tool):
            registry.add(value)
    assert len(registry) == 5, registry.names()
    return set(all_queues(registry))


def read(relative: str) -> str:
    """A file of the repository as text."""
    return (ROOT / relative).read_text()


def path(relative: str) -> Path:
    """A path inside the repository."""
    return ROOT / relative


def check_worker_groups(groups: dict[str, Command]) -> None:
    """Every example queue is consumed by some group, the control queues by one of threads.

    Also: every group names its queues (a worker without ``-Q`` would consume everything,
    defeating the groups), its own pool and concurrency, and no unknown queue. The control
    group serves toolfan's own queues alone, on threads: their tasks mostly wait on the API,
    and a prefork process held by such a wait is one a tool call cannot use.
    """
    expected = example_queues()
    consumed: set[str] = set()
    for name, command in groups.items():
        assert command.queues, f"{name}: no -Q, so it would consume every queue"
        assert set(command.queues) <= expected, f"{name}: unknown queues"
        assert command.gives("-P", "--pool"), f"{name}: no pool of its own (-P)"
        assert command.gives("-c", "--concurrency"), f"{name}: no concurrency of its own (-c)"
        consumed |= set(command.queues)
    assert consumed == expected, f"queues nobody consumes: {expected - consumed}"
    control = [c for n, c in groups.items() if "control" in n]
    assert len(control) == 1, "one control group"
    assert set(control[0].queues) == CONTROL_QUEUES
    assert control[0].options["pool"].__module__.endswith("thread"), "control group on threads"
    assert not any(set(c.queues) & CONTROL_QUEUES for n, c in groups.items() if "control" not in n)
