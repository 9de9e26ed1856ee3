"""The envelopes of execute and submit messages: named fields, and the old shapes still read."""

from __future__ import annotations

import pytest

from tasks.envelope import BadEnvelope, Delivery, Envelope


def test_a_call_envelope_round_trips_and_names_every_field():
    call = Envelope(
        source="assistants",
        batch_id='["t","r"]',
        call_id="c",
        name="add",
        arguments='{"a": 1}',
        turn_id="phase_1",
        agent_id="asst_1",
        metadata={"k": "v"},
        deadline=1.5,
    )
    wire = call.to_wire()
    assert wire["name"] == "add" and wire["source"] == "assistants"
    assert Envelope.from_wire(wire) == call


def test_a_positional_call_of_the_previous_version_is_an_agents_call():
    legacy = Envelope.from_legacy(("sess", "turn", "call", "add", {"a": 1}))
    assert (legacy.source, legacy.batch_id, legacy.turn_id, legacy.call_id) == (
        "agents",
        "sess",
        "turn",
        "call",
    )
    with pytest.raises(BadEnvelope):
        Envelope.from_legacy(("only", "three", "args"))
    with pytest.raises(BadEnvelope):
        Envelope.from_wire({"source": "agents", "batch_id": 5, "call_id": "c", "name": "x"})


def test_a_delivery_envelope_round_trips_and_refuses_missing_fields():
    delivery = Delivery("agents", "sess", "tok", (("t", "c"),), 60_000, 12.5)
    assert Delivery.from_wire(delivery.to_wire()) == delivery
    with pytest.raises(BadEnvelope, match="token"):
        Delivery.from_wire({"source": "agents", "batch_id": "s", "calls": [], "lease_ms": 1})
