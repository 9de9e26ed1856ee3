"""``toolfan approvals`` prints what the model wrote without letting it drive the terminal."""

from __future__ import annotations

import pytest

from dispatcher.cli import main
from handlers import CallContext
from tasks.runtime import get_approvals


@pytest.mark.parametrize("argv", [["approvals", "list"], ["approvals", "list", "--json"]])
def test_control_characters_in_arguments_reach_no_terminal(redis_client, capsys, argv):
    ctx = CallContext("agents", "sess_1", "turn_1", "call_\x1b]0;x\x07", "erase")
    approval, _ = get_approvals().ask(ctx, {"key": "\x1b[2J\x9b31m\u202ered"}, "r", 600, 15)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert approval.id in out
    assert not any(c in out for c in ("\x1b", "\x07", "\x9b", "\u202e"))
