"""``toolfan demo`` (what ``make demo`` runs) works and leaves no process behind."""

import re
import subprocess
import sys
from pathlib import Path

from tests.services import ROOT


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose environment mentions ``text`` (the demo's work directory)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if text.encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_demo_answers_every_session_and_cleans_up(redis_client):
    out = subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", "demo", "--sessions", "12", "--timeout", "60"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "seeded 12 sessions with" in out.stdout
    assert lines[-1].startswith("demo: every session answered exactly once")
    table = dict(
        line.split(None, 1)
        for line in lines
        if line.startswith("  ") and line.split()[0] in {"sessions", "batches"}
    )
    assert table == {"sessions": "12", "batches": "12"}
    assert "every run phase submitted once" in lines[-1]
    assert "both conversations completed" in lines[-1]
    assert "toolfan chat --api responses" in out.stdout
    assert out.stdout.count("step 0: get_weather(") == 2
    assert "  runs                         10" in lines
    assert "  run phases submitted         15" in lines
    workdir = re.search(r"log: (/\S+)/emulator\.log", out.stdout).group(1)
    assert processes_mentioning(workdir) == []
