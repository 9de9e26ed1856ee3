"""The README's tool loop, run as written, against the emulator with the official SDK.

The loop is the lesson's ``run_tool_call_loop`` with its tool-running half replaced by
``toolfan.run_tool_calls``; the emulator's built-in script calls two example tools in
parallel, then answers quoting their outputs. The test runs the README's own code block,
so the README cannot drift from what works.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.services import ROOT

pytestmark = pytest.mark.usefixtures("worker")


def readme_block(after: str) -> str:
    """The first ``python`` code block after the heading ``after``."""
    text = Path(ROOT, "README.md").read_text()
    section = text[text.index(after) :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"no python block after {after!r}"
    return found.group(1)


def test_the_readme_loop_runs_unchanged_against_the_emulator(api, capsys):
    code = readme_block("## Chat Completions and Responses: the fleet as a function call")
    assert "toolfan.run_tool_calls(message.tool_calls" in code
    exec(compile(code, "README.md", "exec"), {})  # the README's own example
    printed = capsys.readouterr().out
    assert "Tool outputs:" in printed
    assert '"temperature"' in printed or "temperature" in printed
    calls = api.chat.calls()
    assert [c["step"] for c in calls] == [0, 1]
    assert api.chat.calls(refused=True) == []
