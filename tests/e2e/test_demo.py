"""``toolfan demo`` (what ``make demo`` runs) works and leaves no process behind."""

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.services import ROOT, default_endings


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


def read_until(proc: subprocess.Popen[bytes], wanted: str, timeout: float) -> str:
    """The demo's output up to a chunk holding ``wanted`` (it prints as it goes).

    Read from the pipe itself: a buffered reader could hold the line while ``select`` waits.
    """
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted.encode() not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {wanted!r} within {timeout} s:\n{seen.decode()}")
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"the demo ended first:\n{seen.decode()}")
            seen += chunk
    return seen.decode()


@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_demo_ended_by_a_signal_stops_its_services_first(redis_client, ending):
    # kill, timeout, a CI job's cancel or a closed terminal: Python's default for these
    # ends the demo at once, and its services (each in its own session) ran on.
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher.cli", "demo", "--sessions", "12", "--timeout", "60"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_endings,  # as a terminal starts it, even under nohup
    )
    try:
        printed = read_until(proc, "starting poller", 90)
        workdir = re.search(r"log: (/\S+)/emulator\.log", printed).group(1)
        assert len(processes_mentioning(workdir)) >= 3  # the emulator, worker and poller
        proc.send_signal(ending)
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = processes_mentioning(workdir)
    for pid in left:  # so that a failure here leaves nothing running either
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    err = stderr.decode(errors="replace")
    assert proc.returncode == 128 + ending, err
    assert f"demo: stopped by {ending.name}; its services are stopped" in err
    assert left == []
