"""Identity is exact: ids with any character never share a result, a key or a batch.

Each test seeds calls whose ids collided in earlier versions (which joined ids with ``:``
inside ``{...}`` hash tags, and idempotency inputs with newlines and tabs), runs them
through the real poller, worker and emulator, and checks every call got its own output.
"""

import json
import subprocess
import sys
from collections import Counter

import pytest

from emulator import function_call
from tasks.runtime import get_ledger
from tests.e2e.harness import poll_loop
from tests.services import ROOT, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def echo(turn: str, call: str) -> dict:
    """A call whose output is its own ids, so a crossed result cannot pass unnoticed."""
    return function_call("echo", {"text": json.dumps([turn, call])}, turn_id=turn, call_id=call)


def outputs(api, sid: str) -> dict[tuple[str, str], str]:
    batches = api.batches(sid)
    assert len(batches) == 1, f"{sid!r} answered {len(batches)} times"
    return {
        (e["turn_id"], e["call_id"]): e.get("output", e.get("error")) for e in batches[0].events
    }


def own_outputs(calls: list[dict]) -> dict[tuple[str, str], str]:
    return {(c["turn_id"], c["call_id"]): c["arguments"]["text"] for c in calls}


def test_ids_holding_the_key_separators_never_share_a_result(api, redis_client):
    within = [echo("t:x", "c"), echo("t", "x:c"), echo("t}", "{c"), echo("t", "}{c")]
    sid = api.create_session(within)["id"]
    across = {name: [echo("turn", "call")] for name in ("a", "a}:x", "a:x", "{a}", "a%7D")}
    for name, calls in across.items():
        api.create_session(calls, session_id=name)
    with poll_loop():
        wait_for(lambda: len(api.batches()) == 1 + len(across), 60, "every answer", 0.1)
    assert outputs(api, sid) == own_outputs(within)
    for name, calls in across.items():
        assert outputs(api, name) == own_outputs(calls)
    assert len(api.batches()) == 1 + len(across)


def test_idempotency_keys_of_batches_with_separator_ids_differ(api, redis_client):
    # Earlier keys hashed "turn\\tcall" lines: one call "c\\nu\\td" and two calls "c",
    # ("u", "d") made the same key, and the second batch was refused as a reused key.
    first = api.create_session([echo("u", "c\nu\td")], session_id="same")["id"]
    with poll_loop():
        wait_for(lambda: api.batches(first), 60, "the first turn's answer", 0.1)
        api.add_actions(first, [echo("u", "c"), echo("u", "d")])
        wait_for(lambda: len(api.batches(first)) == 2, 60, "the second turn's answer", 0.1)
    keys = [b.idempotency_key for b in api.batches(first)]
    assert len(set(keys)) == 2
    statuses = Counter(r.status for r in api.requests("/events", method="POST"))
    assert statuses == {202: 2}


@pytest.mark.parametrize(
    "sid",
    ["a/b", "a%2Fb", "line\nbreak", "sp ace?&#", "\U0001f600", "x" * 2000, "lone\ud800"],
)
def test_any_session_id_is_answered_on_its_own_path(api, redis_client, sid):
    calls = [echo("turn", "call")]
    api.create_session(calls, session_id=sid)
    with poll_loop():
        wait_for(lambda: api.batches(sid), 60, "the answer", 0.1)
    assert outputs(api, sid) == own_outputs(calls)


def test_inspect_shows_ids_as_sent(api, redis_client):
    calls = [echo("t:x", "c"), echo("t", "x:c")]
    sid = "s:{1}:*?["
    api.create_session(calls, session_id=sid)
    with poll_loop():
        wait_for(lambda: api.batches(sid), 60, "the answer", 0.1)
        wait_for(lambda: get_ledger("agents").claim_owner(sid) is None, 10, "the claim release")
    out = subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", "inspect", sid],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert view["session_id"] == sid
    shown = {(c["turn_id"], c["call_id"]): c["result"]["output"] for c in view["calls"]}
    assert shown == own_outputs(calls)
    assert {c["state"] for c in view["calls"]} == {"submitted"}
