"""Loaded by a test's model worker (through TOOLFAN_HANDLERS): widen a crash window.

With ``TEST_PAUSE_AFTER_ANSWER`` set to a step number, the worker pauses for
``TEST_PAUSE_SECONDS`` right after it saved that step's model answer, before it acts on it,
so a test can SIGKILL it at exactly that point: the answer is saved, nothing else is done.
"""

from __future__ import annotations

import os
import time
from typing import Any

from dispatcher.conversations.store import ConversationStore

_save_answer = ConversationStore.save_answer


def _pausing_save_answer(self: ConversationStore, cid: str, step: int, answer: Any) -> Any:
    saved = _save_answer(self, cid, step, answer)
    if os.environ.get("TEST_PAUSE_AFTER_ANSWER") == str(step):
        self.client.set(f"test:paused:{cid}", step)
        time.sleep(float(os.environ.get("TEST_PAUSE_SECONDS", "30")))
    return saved


ConversationStore.save_answer = _pausing_save_answer  # type: ignore[method-assign]
