"""One ``python -m bench ...`` run in a subprocess, as the bench's smoke tests make it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.services import ROOT


def run_bench(args: list[str], out: Path, document: str, timeout: float) -> dict[str, Any]:
    """Run the bench with ``args`` writing to ``out``; its JSON ``document``, output and time.

    The subprocess gets the suite's environment (its private Redis, if any) without the
    pytest marker that would make it think it is a test.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_CURRENT_TEST", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bench", *args, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {
        "json": json.loads((out / document).read_text()),
        "stdout": done.stdout,
        "stderr": done.stderr,
        "out": out,
        "seconds": time.monotonic() - started,
    }
