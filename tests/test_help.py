"""Every command's ``--help`` prints: a help string argparse cannot format fails only there.

argparse formats help strings with ``%``, so a stray percent sign (``40% of``) raises
``TypeError`` the moment a user asks for help, and nowhere else.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import pytest

from bench import anatomy, curves, pairs, remote, soak
from bench.__main__ import build_parser as bench_parser
from dispatcher.cli import build_parser as toolfan_parser
from tests.chaos.run import parse_args as chaos_args
from tests.fuzz.run import parse_args as fuzz_args


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and each of its sub-commands' parsers, at any depth."""
    yield parser
    for action in parser._actions:  # argparse keeps sub-commands in this private list only
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


BUILDERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "toolfan": toolfan_parser,
    "bench": bench_parser,
    "bench anatomy": anatomy.build_parser,
    "bench curves": curves.build_parser,
    "bench pairs": pairs.build_parser,
    "bench remote": remote.build_parser,
    "bench soak": soak.build_parser,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_help_of_a_command_and_its_subcommands_prints(name: str) -> None:
    parsers = list(every_parser(BUILDERS[name]()))
    for parser in parsers:
        assert parser.format_help().startswith("usage: ")
    if name == "toolfan":  # the walk reached the sub-commands
        assert {"toolfan worker", "toolfan poll", "toolfan runs"} <= {p.prog for p in parsers}


@pytest.mark.parametrize("parse", [fuzz_args, chaos_args])
def test_the_campaigns_help_prints(
    parse: Callable[[list[str]], object], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        parse(["--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")
