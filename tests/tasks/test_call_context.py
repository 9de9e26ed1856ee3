"""The engine's side of ``CallContext``: built from the envelope, whatever crossed the broker."""

from __future__ import annotations

import json

import pytest

from handlers import idempotency_key
from tasks.context import batch_ids, context_of
from tasks.envelope import Envelope


def test_a_session_s_call_names_its_session_agent_metadata_and_deadline():
    envelope = Envelope(
        "agents",
        "sess_1",
        "call_1",
        "refund",
        {},
        turn_id="turn_1",
        agent_id="agent_1",
        metadata={"customer_id": "cus_9"},
        deadline=1_800_000_000,
    )
    ctx = context_of(envelope, 1)
    assert (ctx.source, ctx.session_id, ctx.turn_id, ctx.call_id) == (
        "agents",
        "sess_1",
        "turn_1",
        "call_1",
    )
    assert (ctx.function, ctx.agent_id, dict(ctx.metadata)) == (
        "refund",
        "agent_1",
        {"customer_id": "cus_9"},
    )
    assert ctx.deadline == 1_800_000_000.0 and ctx.attempt == 1
    assert ctx.idempotency_key == idempotency_key("agents", "sess_1", "turn_1", "call_1")
    assert context_of(envelope, 3).idempotency_key == ctx.idempotency_key  # a redelivery


def test_a_run_s_call_names_its_thread_and_run():
    batch = json.dumps(["thread_1", "run_1"])
    ctx = context_of(Envelope("assistants", batch, "call_1", "f", {}, turn_id="phase_1"), 2)
    assert (ctx.thread_id, ctx.run_id, ctx.session_id, ctx.attempt) == (
        "thread_1",
        "run_1",
        None,
        2,
    )


@pytest.mark.parametrize(
    ("source", "batch"),
    [("assistants", "not json"), ("assistants", "[1, 2]"), ("inline", "chat_abc"), ("gone", "x")],
)
def test_a_batch_id_its_source_cannot_read_names_nothing(source, batch):
    assert batch_ids(source, batch) == {}


@pytest.mark.parametrize(
    "hostile",
    [
        {"agent_id": 7, "metadata": {"k": 1, 2: "v", "ok": "yes"}, "deadline": "tomorrow"},
        {"agent_id": None, "metadata": ["k", "v"], "deadline": float("nan")},
        {"agent_id": ["a"], "metadata": "k=v", "deadline": True},
    ],
)
def test_garbled_envelope_fields_give_an_emptier_context_never_a_crash(hostile):
    envelope = Envelope("agents", "sess_1", "call_1", "f", {}, **hostile)
    ctx = context_of(envelope, 0)
    assert ctx.agent_id is None and ctx.deadline is None and ctx.attempt == 1
    assert dict(ctx.metadata) in ({}, {"ok": "yes"})
