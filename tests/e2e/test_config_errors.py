"""An operator's mistake costs time, never work: configuration errors keep batches retryable.

Earlier, a refused key or an unusable base URL marked every batch abandoned, final for seven
days, so fixing the setting answered none of the sessions it had met.
"""

import os
import subprocess
import sys
import uuid

import pytest

from dispatcher.sources.agents import SOURCE, AgentsSource, NoRoute
from emulator import function_call
from tasks.execute import execute_call
from tasks.ledger import ABANDONED, DONE, SUBMITTED, CallRef
from tasks.runtime import get_ledger
from tasks.settings import load_registry
from tasks.submit import Submitted, submit_results
from tests.e2e.harness import poller
from tests.services import ROOT, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def toolfan(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def counted(api, n: int = 2, seconds: float = 0.0) -> tuple[str, list[dict], list[str]]:
    keys = [uuid.uuid4().hex for _ in range(n)]
    calls = [function_call("slow_count", {"key": k, "seconds": seconds}, turn_id="t") for k in keys]
    return api.create_session(calls)["id"], calls, keys


def refs(sid: str, calls: list[dict]) -> list[CallRef]:
    return [CallRef(sid, c["turn_id"], c["call_id"]) for c in calls]


def test_a_revoked_key_keeps_the_batch_until_the_key_works_again(api, emulator, redis_client):
    sid, calls, keys = counted(api, seconds=1.0)
    assert poller().poll_once().calls_dispatched == 2
    emulator.app.api.api_key = "a-key-nobody-has"  # revoked while the calls run
    try:
        wait_for(lambda: any(r.status == 401 for r in api.requests("/events")), 30, "a 401")
        states = {get_ledger("agents").record(r).state for r in refs(sid, calls)}
        assert states == {DONE}, "a refused key must not abandon the batch"
    finally:
        emulator.app.api.api_key = None
    wait_for(lambda: api.batches(sid), 60, "the batch once the key works", 0.2)
    assert [redis_client.get(f"test:runs:{k}") for k in keys] == ["1", "1"]
    assert {get_ledger("agents").record(r).state for r in refs(sid, calls)} == {SUBMITTED}


def test_a_base_url_without_the_sessions_endpoint_is_a_setting_not_a_refusal(api, emulator):
    from dispatcher.client import AgentsClient

    sid, calls, _ = counted(api)
    ledger = get_ledger("agents")
    for ref, call in zip(refs(sid, calls), calls, strict=True):
        execute_call(ref, call["name"], call["arguments"], ledger, load_registry())
    ledger.claim(sid, "tok", 60_000)
    wrong = AgentsClient(base_url=f"{emulator.url}/not-the-api")
    with pytest.raises(NoRoute, match="OPENAI_BASE_URL"):
        submit_results(
            sid, "tok", *_claimed(sid, calls, ledger), ledger, AgentsSource(wrong), 60_000
        )
    assert {ledger.record(r).state for r in refs(sid, calls)} == {DONE}
    assert ledger.claim_owner(sid) == "tok"


def test_a_session_the_api_no_longer_has_is_abandoned(api):
    calls = [function_call("add", {"a": 1, "b": 1}, turn_id="t")]
    sid = "sess_gone"
    ledger = get_ledger("agents")
    execute_call(refs(sid, calls)[0], "add", calls[0]["arguments"], ledger, load_registry())
    ledger.claim(sid, "tok", 60_000)
    outcome = submit_results(sid, "tok", *_claimed(sid, calls, ledger), ledger, SOURCE, 1)
    assert outcome is Submitted.ABANDONED
    assert ledger.record(refs(sid, calls)[0]).state == ABANDONED


def _claimed(sid: str, calls: list[dict], ledger) -> tuple[list[list[str]], list[dict]]:
    pairs = [[c["turn_id"], c["call_id"]] for c in calls]
    results = []
    for ref, call in zip(refs(sid, calls), calls, strict=True):
        saved = ledger.record(ref).result.to_json_dict()
        ids = {"batch_id": sid, "turn_id": ref.turn_id, "call_id": ref.call_id}
        results.append({**ids, "name": call["name"], **saved})
    return pairs, results


@pytest.mark.parametrize(
    ("env", "setting", "words"),
    [
        ({"OPENAI_BASE_URL": "ftp://api.example.com/v1"}, "OPENAI_BASE_URL", "not an http(s) URL"),
        ({"OPENAI_BASE_URL": "http://nonexistent.invalid/v1"}, "OPENAI_BASE_URL", "unknown to DNS"),
        ({"OPENAI_API_KEY": " "}, "OPENAI_API_KEY", "no API key"),
        ({"TOOLFAN_REDIS_URL": "redis://127.0.0.1:9/0"}, "TOOLFAN_REDIS_URL", "does not answer"),
        ({"TOOLFAN_MAX_DEPTH": "deep"}, "TOOLFAN_MAX_DEPTH", "valid integer"),
    ],
)
def test_worker_and_poller_refuse_to_start_naming_the_setting(env, setting, words):
    for command in (["worker"], ["poll", "--interval", "1"]):
        out = toolfan(*command, timeout=30, **env)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith(f"toolfan: cannot start: {setting}: ")
        assert words in lines[0]


def test_check_says_ok_and_names_a_refused_key(api):
    ok = toolfan("check")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[-1] == "toolfan: configuration ok"
    assert [line.split()[:2] for line in ok.stdout.splitlines()[:5]] == [
        ["settings", "ok"],
        ["redis", "ok"],
        ["broker", "ok"],
        ["api", "ok"],
        ["sources", "ok"],
    ]
    from emulator import running_emulator

    with running_emulator(api_key="the-right-key") as strict:
        refused = toolfan("check", OPENAI_BASE_URL=strict.base_url, OPENAI_API_KEY="sk-wrong")
    assert refused.returncode == 2
    assert "api      error  OPENAI_API_KEY: the API key was refused" in refused.stdout
    assert "sk-wrong" not in refused.stdout + refused.stderr


def test_resubmit_sends_saved_results_of_an_abandoned_session_again(api, redis_client):
    sid, calls, keys = counted(api)
    ledger = get_ledger("agents")
    for ref, call in zip(refs(sid, calls), calls, strict=True):
        execute_call(ref, call["name"], call["arguments"], ledger, load_registry())
    ledger.mark_abandoned(refs(sid, calls), "refused while the key was wrong")
    assert poller().poll_once().skipped_submitted == 2  # final: no poll sends it again
    out = toolfan("resubmit", "--abandoned")
    assert out.returncode == 0, out.stderr
    assert (
        f"resubmit: session {sid}: 2 call(s) reopened; 2 saved result(s) sent again" in out.stdout
    )
    wait_for(lambda: api.batches(sid), 30, "the batch", 0.1)
    assert [e["output"] for e in api.batches(sid)[0].events] == ["1", "1"]
    assert [redis_client.get(f"test:runs:{k}") for k in keys] == ["1", "1"]
    wait_for(lambda: ledger.record(refs(sid, calls)[0]).state == SUBMITTED, 10, "submitted")
    again = toolfan("resubmit", sid)
    assert "the API lists no pending function call" in again.stdout
