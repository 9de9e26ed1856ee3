"""The emulator's public API is what ``__all__`` says, sorted, and it stands alone."""

from __future__ import annotations

import subprocess
import sys

import emulator


def test_all_is_sorted_and_importable() -> None:
    assert emulator.__all__ == sorted(emulator.__all__)
    for name in emulator.__all__:
        assert getattr(emulator, name) is not None


def test_emulator_imports_nothing_of_toolfan() -> None:
    code = (
        "import sys, emulator, emulator.server, emulator.testing; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'handlers', 'tasks', 'dispatcher'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
