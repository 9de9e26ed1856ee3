"""Records written before sources are honoured once the new version starts.

The records are made by the ledger and then moved back to the key layout of the version
before sources (``toolfan:call:{sess}:turn:call``): their fields are the ones that version
wrote, only their keys differ. Without the upgrade the new layout cannot see them, so a
saved result would be computed again and an abandoned batch answered again.
"""

from __future__ import annotations

import uuid

import pytest

from emulator import function_call
from handlers.result import CallResult
from tasks.ledger import CallRef
from tasks.runtime import get_ledger
from tasks.upgrade import upgrade_ledger
from tests.e2e.harness import poller
from tests.services import wait_for

pytestmark = pytest.mark.usefixtures("worker")

CURRENT = "toolfan:v2:agents:"


def as_legacy(redis_client) -> int:
    """Move every record to the key it had in the version before sources."""
    moved = 0
    for key in list(redis_client.scan_iter(f"{CURRENT}*")):
        redis_client.rename(key, "toolfan:" + key[len(CURRENT) :])
        moved += 1
    return moved


def ref_of(api, sid: str) -> CallRef:
    (action,) = api.session(sid)["required_actions"]
    return CallRef(sid, action["turn_id"], action["call_id"])


def test_saved_and_abandoned_records_of_the_previous_layout_are_honoured(api, redis_client):
    saved_key, abandoned_key = uuid.uuid4().hex, uuid.uuid4().hex
    saved = api.create_session([function_call("count", {"key": saved_key})])["id"]
    refused = api.create_session([function_call("count", {"key": abandoned_key})])["id"]
    ledger = get_ledger("agents")
    ref_saved, ref_refused = ref_of(api, saved), ref_of(api, refused)
    for ref in (ref_saved, ref_refused):
        ledger.begin(ref, "count")
        ledger.finish(ref, CallResult.ok("saved before the upgrade"))
    ledger.mark_abandoned([ref_refused], "refused for good before the upgrade")
    redis_client.set(f"toolfan:claim:{{{saved}}}", "old-token", px=60_000)
    assert as_legacy(redis_client) == 2  # the two call records (the claim is legacy already)
    assert ledger.record(ref_saved) is None  # the current layout does not see them yet

    assert upgrade_ledger(redis_client, force=True) == 3
    assert redis_client.get("toolfan:schema") == "v2"
    assert ledger.claim_owner(saved) == "old-token"  # a claim keeps its owner and its lease
    assert 0 < redis_client.pttl(f"{CURRENT}claim:{{{saved}}}") <= 60_000
    redis_client.delete(f"{CURRENT}claim:{{{saved}}}")  # as if that lease ran out

    summary = poller().poll_once()
    assert summary.skipped_submitted == 1  # the abandoned call stays abandoned
    wait_for(lambda: api.batches(saved), 30, "the saved result to be submitted")
    (event,) = api.batches(saved)[0].events
    assert event["output"] == "saved before the upgrade"
    assert redis_client.get(f"test:runs:{saved_key}") is None, "a saved call ran again"
    assert api.batches(refused) == []
