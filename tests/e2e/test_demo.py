"""``toolfan demo`` (what ``make demo`` runs) works and leaves no process behind."""

import subprocess
import sys

from tests.services import ROOT


def demo_processes() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    return [
        line
        for line in ps.stdout.splitlines()
        if "dispatcher.cli" in line
        and ("demo-" in line or " emulator " in line or "poll --interval 0.5" in line)
    ]


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
        line.split(None, 1)[::1]
        for line in lines
        if line.startswith("  ") and line.split()[0] in {"sessions", "batches"}
    )
    assert table == {"sessions": "12", "batches": "12"}
    assert demo_processes() == []
