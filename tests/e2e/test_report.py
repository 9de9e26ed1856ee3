"""``toolfan inspect`` and ``toolfan status``: the ledger's view for operators."""

import json
import subprocess
import sys
import time
import uuid

import pytest

from emulator import function_call
from tasks.runtime import get_ledger
from tests.e2e.harness import Seeded, check_exactly_once, poll_loop
from tests.services import ROOT, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def toolfan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_inspect_shows_calls_states_results_and_submission(api, redis_client):
    key = uuid.uuid4().hex
    calls = [
        function_call("count", {"key": key}, turn_id="turn_1"),
        function_call("boom", {}, turn_id="turn_2"),
    ]
    sid = api.create_session(calls)["id"]
    with poll_loop():
        wait_for(lambda: api.batches(sid), 60, "the batch")
        wait_for(lambda: get_ledger("agents").claim_owner(sid) is None, 10, "the claim release")
    check_exactly_once(api, Seeded(calls={sid: calls}, counters=[key]), redis_client)
    out = toolfan("inspect", sid)
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert view["claim_owner"] is None
    assert view["dispatch"]["token"]
    by_call = {c["call_id"]: c for c in view["calls"]}
    first, second = by_call[calls[0]["call_id"]], by_call[calls[1]["call_id"]]
    assert first["state"] == second["state"] == "submitted"
    assert first["attempts"] == 1 and first["name"] == "count"
    assert first["result"] == {"success": True, "outcome": "ok", "output": "1"}
    assert second["result"]["error"] == "Function 'boom' failed: RuntimeError: kaboom"
    assert first["submission_key"] == api.batches(sid)[0].idempotency_key
    assert first["submitted_at"] >= first["finished_at"] >= first["started_at"]
    assert toolfan("inspect", "sess_unknown").returncode == 1


def test_status_counts_calls_and_claims(api, redis_client):
    from handlers.result import CallResult
    from tasks.ledger import CallRef, Dispatch

    ledger = get_ledger("agents")
    for i in range(3):
        ledger.begin(CallRef("s_run", "t", f"c{i}"), "add")
    ledger.finish(CallRef("s_run", "t", "c0"), CallResult.ok("1"))
    ledger.mark_submitted("s_done", "none", [CallRef("s_done", "t", "c")], "k")
    ledger.mark_abandoned([CallRef("s_bad", "t", "c")], "HTTP 409")
    ledger.claim("s_run", "tok", 60_000)
    ledger.record_dispatch("s_run", Dispatch("tok", 0.0, 60_000))  # long past its tools' time
    ledger.claim("s_new", "tok2", 60_000)
    ledger.record_dispatch("s_new", Dispatch("tok2", 9e12, 60_000))
    # A worker that stopped beating a minute ago while a call of s_run was running on it.
    redis_client.zadd("toolfan:workers", {"gone@host#1": time.time() - 60})
    ledger.begin(CallRef("s_run", "t", "c1"), "add", worker="gone@host#1/7")
    redis_client.set("toolfan:orphans:redone", 2)
    # The suite's worker beats every 2 s: it is listed again soon after the flush.
    wait_for(lambda: redis_client.zcard("toolfan:workers") == 2, 10, "the worker's heartbeat")
    out = toolfan("status")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:4] == [
        "calls in flight: 3 (2 running, 1 awaiting submit)",
        "calls submitted: 1",
        "calls abandoned: 1",
        "claims held: 2 (1 stale)",
    ]
    assert lines[4].startswith("workers alive: 1 (test@")
    assert lines[5:] == [
        "workers dead in the last hour: 1 (1 still holding 1 started calls)",
        "orphaned calls redone: 2",
    ]
