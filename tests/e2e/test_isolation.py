"""One bad result costs itself: good results are never abandoned for a neighbour.

Earlier, an empty ``input_text`` part passed toolfan's checks, the API refused the batch
with 400 ``events[0].output[0].text``, and every good result of the session was abandoned
with it. Now toolfan drops what the API refuses before sending, and when the API still
refuses a batch naming one event, that result alone is replaced by an error and the batch
goes again.
"""

import pytest

from emulator import function_call
from tasks.ledger import SUBMITTED, CallRef
from tasks.runtime import get_ledger
from tests.e2e.harness import poll_loop
from tests.services import wait_for

pytestmark = [pytest.mark.usefixtures("worker"), pytest.mark.quick]


def test_an_empty_text_part_no_longer_costs_the_batch(api):
    calls = [
        function_call("emit", {"kind": "empty_part", "text": "kept"}, turn_id="t", call_id="e"),
        function_call("add", {"a": 1, "b": 2}, turn_id="t", call_id="good"),
    ]
    sid = api.create_session(calls)["id"]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 30, "the batch", 0.1)
    events = {e["call_id"]: e for e in api.batches(sid)[0].events}
    assert events["e"]["output"] == [{"type": "input_text", "text": "kept"}]
    assert events["good"]["output"] == "3"
    assert all(r.status == 202 for r in api.requests("/events", method="POST"))


def test_a_result_the_api_refuses_is_replaced_and_the_rest_delivered(api, redis_client):
    api.set_faults(refuse_text="FORBIDDEN")
    calls = [
        function_call("echo", {"text": "first FORBIDDEN word"}, turn_id="t", call_id="bad"),
        function_call("echo", {"text": "second FORBIDDEN word"}, turn_id="t", call_id="bad2"),
        function_call("add", {"a": 1, "b": 2}, turn_id="t", call_id="good"),
    ]
    sid = api.create_session(calls)["id"]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 30, "the batch", 0.1)
    events = {e["call_id"]: e for e in api.batches(sid)[0].events}
    assert events["good"]["output"] == "3"
    for refused in ("bad", "bad2"):
        assert events[refused]["success"] is False
        assert events[refused]["error"].startswith("The function ran, but the API refused")
        assert "content was refused" in events[refused]["error"]
    posts = api.requests(f"/{sid}/events", method="POST")
    assert [p.status for p in posts] == [400, 400, 202]
    assert len({p.idempotency_key for p in posts}) == 3  # each changed body has its own key
    ledger = get_ledger("agents")
    record = ledger.record(CallRef(sid, "t", "bad"))
    assert record.state == SUBMITTED
    assert record.refused_reason and "content was refused" in record.refused_reason
    assert record.result.outcome.value == "refused"
    assert ledger.record(CallRef(sid, "t", "good")).result.output == "3"
