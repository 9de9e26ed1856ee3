"""The beat's poll task: one pass at a time in a process, however many threads take polls."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dispatcher import beat


class _Summary:
    def as_dict(self) -> dict[str, Any]:
        return {"sessions_seen": 3}


def test_a_poll_while_this_process_still_passes_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entered, release = threading.Event(), threading.Event()
    passes: list[str] = []

    def slow_pass() -> _Summary:
        passes.append(threading.current_thread().name)
        entered.set()
        release.wait(10)
        return _Summary()

    monkeypatch.setattr(beat, "poll_sources", slow_pass)
    results: dict[str, Any] = {}
    first = threading.Thread(target=lambda: results.update(first=beat.poll.run()))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=lambda: results.update(second=beat.poll.run()))
    second.start()
    second.join(5)  # a second pass would wait on the first's release
    skipped = not second.is_alive()
    release.set()
    first.join(10)
    second.join(10)
    assert skipped and results["second"] == {"skipped": 1}
    assert results["first"] == {"sessions_seen": 3} and len(passes) == 1
    # Once the pass is over, the next beat's poll runs again.
    assert beat.poll.run() == {"sessions_seen": 3} and len(passes) == 2
