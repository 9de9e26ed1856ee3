"""Signatures of single Agents calls, as the poller sends them, for tests that bypass it."""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature


def agents_call(
    session_id: str, turn_id: str, call_id: str, name: str, arguments: Any
) -> Signature[Any]:
    """A routed ``execute`` of one call of an Agents session."""
    from tasks.envelope import Envelope  # after conftest has set the environment
    from tasks.execute import call_signature

    envelope = Envelope(
        source="agents",
        batch_id=session_id,
        turn_id=turn_id,
        call_id=call_id,
        name=name,
        arguments=arguments,
    )
    return call_signature(envelope)
