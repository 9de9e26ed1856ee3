"""The poller survives any page: a bad page costs a pass, a bad session costs itself.

Earlier, a page nested 5,000 deep killed ``toolfan poll --interval``; a repeated cursor hung
a pass for good (and SIGTERM no longer stopped it); an endless listing never ended a pass;
one 5,000-digit number failed its whole page on every pass; one non-string metadata value
skipped its session with its valid calls; a malformed entry was logged on every pass.
"""

import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from dispatcher.poll import Poller
from emulator import function_call
from tasks.runtime import get_ledger
from tasks.settings import get_settings
from tests.e2e.harness import client, poll_loop, poller
from tests.services import ROOT, wait_for

pytestmark = pytest.mark.usefixtures("worker")


def adder(call_id: str = "c") -> dict:
    return function_call("add", {"a": 2, "b": 3}, turn_id="t", call_id=call_id)


def poll_process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher.cli", "poll", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("garbage", ["deep", "not_json", "array"])
def test_a_garbage_page_fails_one_pass_and_the_loop_goes_on(api, garbage):
    api.set_faults(list_garbage=garbage)
    proc = poll_process("--interval", "0.2")
    try:
        wait_for(lambda: len(api.requests("/agents/sessions", "GET")) >= 3, 30, "three passes")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        api.set_faults()
        sid = api.create_session([adder()])["id"]
        wait_for(lambda: api.batches(sid), 30, "the answer once pages are fine again", 0.1)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    failures = [line for line in err.splitlines() if line.startswith("toolfan: poll failed:")]
    if garbage == "deep":  # a page read with its too-deep entry skipped: one error a pass
        assert any(line.endswith("; 1 errors") for line in out.splitlines()), out
    else:
        assert failures and all("UnexpectedResponseError" in line for line in failures)
    assert len(max(err.splitlines() or [""], key=len)) < 1_000


def test_a_repeated_cursor_ends_the_pass_with_a_warning(api, caplog):
    for i in range(3):
        api.create_session([adder(f"c{i}")])
    api.set_faults(list_repeat_cursor=True)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="toolfan.poll"):
        summary = poller().poll_once()
    assert time.monotonic() - started < 10
    assert summary.passes_cut == 1
    assert "repeated the cursor" in caplog.text


def test_an_endless_listing_ends_at_the_page_budget_and_the_next_pass_goes_on(api):
    # The default budget (10,000 pages) would take minutes here; five pages show the rule.
    # The agent filter tells this poller's requests from any other process's.
    agent = "agent_endless"
    settings = get_settings().model_copy(update={"poll_max_pages": 5, "agent_id": agent})
    sid = api.create_session([adder()], agent_id=agent)["id"]
    api.set_faults(list_endless=True)

    def ours() -> list[str]:
        return [r.query for r in api.requests("/agents/sessions", "GET") if agent in r.query]

    p = Poller(client(), get_ledger("agents"), settings)
    first = p.poll_once()
    assert first.passes_cut == 1 and len(ours()) == 5
    second = p.poll_once()
    assert second.passes_cut == 1 and len(ours()) == 10
    assert "after=" not in ours()[0] and "after=" in ours()[5]  # it resumed where it stopped
    wait_for(lambda: api.batches(sid), 30, "the real session's answer", 0.1)
    assert get_settings().poll_max_pages == 10_000 and get_settings().poll_max_seconds == 300


def test_bad_fields_cost_only_their_own_session_or_call(api):
    fine = api.create_session([adder()])["id"]
    huge_stamp = api.create_session([adder()], raw={"created_at": "1" * 5_000})["id"]
    odd_meta = api.create_session([adder()], raw={"metadata": '{"team": 5, "env": "x"}'})["id"]
    bad_actions = api.create_session([adder()], raw={"required_actions": '{"not": "a list"}'})["id"]
    with poll_loop():
        for sid in (fine, huge_stamp, odd_meta):
            wait_for(lambda sid=sid: api.batches(sid), 30, "every readable session", 0.1)
    for sid in (fine, huge_stamp, odd_meta):
        assert api.batches(sid)[0].events[0]["output"] == "5"
    assert api.batches(bad_actions) == []


def test_a_malformed_entry_is_logged_once_however_many_passes_see_it(api, caplog):
    sid = api.create_session(
        [adder(), {"type": "function_call", "turn_id": "t", "call_id": "", "name": "add"}]
    )["id"]
    api.set_faults(apply_lag=60)  # the session stays listed, answered call and all
    p = poller()
    with caplog.at_level(logging.ERROR, logger="toolfan.poll"):
        summaries = [p.poll_once() for _ in range(3)]
    assert [s.errors for s in summaries] == [1, 1, 1]  # counted every pass
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1 and "unreadable required action" in logged[0].getMessage()
    wait_for(lambda: api.batches(sid), 30, "the good call's answer", 0.1)


def test_sigterm_ends_a_pass_within_a_second_even_mid_request(api):
    proc = poll_process("--interval", "0.5")
    try:
        wait_for(lambda: len(api.requests("/agents/sessions", "GET")) >= 2, 30, "a first pass")
        api.set_faults(latency=30, endpoints=["list"])
        time.sleep(1.5)  # the next pass now waits on a list request answered in 30 s
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert took < 1.5, f"stopped {took:.2f} s after SIGTERM"
    assert out.strip().splitlines()[-1] == "poll: stopped"
