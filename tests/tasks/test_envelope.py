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


def test_hostile_metadata_is_bounded_before_it_is_copied_into_every_call():
    from tasks.dispatch import Batch, Dispatcher, PendingCall
    from tasks.ledger import Dispatch
    from tasks.runtime import get_ledger, get_settings

    hostile = {f"k{i}": "v" * 10 for i in range(10_000)}
    hostile.update({"long_value": "x" * 100_000, "k" * 1000: "long key", "n": 5})
    batch = Batch("sess_1", [PendingCall("t", "c", "add", {})], metadata=hostile)
    dispatcher = Dispatcher("agents", get_ledger("agents"), get_settings())
    envelope = dispatcher._envelope(batch, batch.calls[0], Dispatch("tok", 0.0, 1000, None, 0.0))
    metadata = envelope.to_wire()["metadata"]
    assert len(metadata) == 16
    assert all(len(k) <= 64 and len(v) <= 512 for k, v in metadata.items())
    assert list(metadata) == [f"k{i}" for i in range(16)]


def test_metadata_within_the_apis_bounds_travels_whole():
    from tasks.envelope import bounded_metadata

    fine = {f"key_{i}": "v" * 512 for i in range(16)}
    assert bounded_metadata(fine) == fine
    assert bounded_metadata({}) is None
    assert bounded_metadata(["not", "a", "mapping"]) is None
    assert bounded_metadata({"a": 1, "b": "2"}) == {"b": "2"}
