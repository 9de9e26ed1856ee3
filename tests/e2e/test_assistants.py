"""The ``assistants`` source end to end: runs watched, each phase submitted exactly once.

Real processes throughout: ``toolfan worker`` and ``toolfan poll --interval`` with
``TOOLFAN_SOURCES=assistants``, the emulator's runs over HTTP, default budgets. The Azure
OpenAI and Foundry flavours are chosen only by the variables their SDKs use.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from dispatcher.sources.assistants import batch_id, phase_of
from handlers import idempotency_key
from tasks.ledger import CallRef, Ledger
from tests.e2e.runs_stack import ROOT, RunsStack
from tests.services import wait_for


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[RunsStack]:
    with RunsStack(tmp_path_factory.mktemp("runs")) as running:
        yield running


@pytest.fixture
def state(stack: RunsStack):
    stack.state.reset()
    return stack.state


def toolfan(stack: RunsStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", *args],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def watch(stack: RunsStack, *runs: dict) -> None:
    ids = [x for run in runs for x in (run["thread_id"], run["id"])]
    done = toolfan(stack, "runs", "watch", *ids)
    assert done.returncode == 0, done.stderr


def call(name: str, arguments, call_id: str | None = None) -> dict:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"name": name, "arguments": text, "id": call_id or f"call_{uuid.uuid4().hex[:12]}"}


def finished(state, run: dict, timeout: float = 60) -> dict:
    def over():
        now = state.run(run["thread_id"], run["id"])
        return now if now["status"] in ("completed", "expired", "cancelled", "failed") else None

    return wait_for(over, timeout, f"run {run['id']} to finish", 0.1)


def outputs(state, run: dict) -> list[list[tuple[str, str]]]:
    """Each applied submit's (call id, output) pairs, in the order sent."""
    submits = state.submits(run["thread_id"], run["id"])
    return [[(o["tool_call_id"], o["output"]) for o in s["tool_outputs"]] for s in submits]


def test_every_phase_is_answered_once_in_the_run_s_order_with_errors_as_json(stack, state):
    key = uuid.uuid4().hex
    first = [
        call("add", {"a": 2, "b": 3}, "call_add"),
        call("add", "{not json", "call_bad_json"),
        call("no_such_function", {}, "call_unknown"),
        call("boom", {}, "call_boom"),
        call("count", {"key": key}, "call_count"),
    ]
    second = [call("add", {"a": 30, "b": 4}, "call_second")]
    run = state.create_run([first, second])
    watch(stack, run)
    assert finished(state, run)["status"] == "completed"
    phases = outputs(state, run)
    assert len(phases) == 2, "each phase is submitted exactly once"
    assert [cid for cid, _ in phases[0]] == [c["id"] for c in first]
    by_id = dict(phases[0])
    assert by_id["call_add"] == "5"
    assert by_id["call_count"] == "1"
    for failing in ("call_bad_json", "call_unknown", "call_boom"):
        assert set(json.loads(by_id[failing])) == {"error"}, by_id[failing]
    assert "no_such_function" in json.loads(by_id["call_unknown"])["error"]
    assert "kaboom" in json.loads(by_id["call_boom"])["error"]
    assert phases[1] == [("call_second", "34")]
    assert stack.redis().get(f"test:runs:{key}") == "1"
    wait_for(lambda: not _watched(stack), 10, "the finished run to leave the watch list")


def run_ledger(stack: RunsStack) -> Ledger:
    """The stack's ledger of runs, to read what toolfan recorded."""
    return Ledger(stack.redis(), ttl=3600, source="assistants")


def _watched(stack: RunsStack) -> list[dict]:
    listed = toolfan(stack, "runs", "list")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def test_a_submit_whose_answer_was_lost_counts_as_delivered_and_is_not_repeated(stack, state):
    state.set_faults(lost_202_rate=1.0, budget=1, endpoints=["submit_outputs"])
    run = state.create_run([[call("add", {"a": 1, "b": 1})], [call("add", {"a": 2, "b": 2})]])
    watch(stack, run)
    assert finished(state, run)["status"] == "completed"
    submits = state.submits(run["thread_id"], run["id"])
    assert [s["lost"] for s in submits] == [True, False]  # the lost one was applied once
    assert [o for phase in outputs(state, run) for _, o in phase] == ["2", "4"]
    (lost_call,) = (o["tool_call_id"] for o in submits[0]["tool_outputs"])
    record = run_ledger(stack).record(
        CallRef(batch_id(run["thread_id"], run["id"]), phase_of([lost_call]), lost_call)
    )
    assert record is not None and record.state == "submitted", "counted as delivered"


def test_a_hundred_runs_through_500s_and_429s_and_two_pollers_each_phase_once(stack, state):
    state.set_faults(
        error_rate=0.2,
        throttle_rate=0.1,
        retry_after=0.2,
        seed=3,
        endpoints=["runs", "submit_outputs"],
    )
    runs = []
    for i in range(100):
        phases = [[call("add", {"a": i, "b": 1}), call("echo", {"text": f"r{i}"})]]
        if i % 3 == 0:
            phases.append([call("add", {"a": i, "b": 2})])
        if i % 5 == 0:
            phases[0].append(call("add", "{oops"))  # invalid JSON arguments
        if i % 7 == 0:
            phases[0].append(call("no_such_function", {}))
        if i % 11 == 0:
            phases[0].append(call("boom", {}))  # a failing tool
        runs.append(state.create_run(phases))
    second = stack.service(["poll", "--interval", "0.3"], "poller2")  # two pollers race
    try:
        second.wait_for_output("runs:", 60)
        watch(stack, *runs)
        for run in runs:
            assert finished(state, run, 120)["status"] == "completed"
    finally:
        second.stop()  # the module's later tests count one poller's reads
    for i, run in enumerate(runs):
        phases = outputs(state, run)
        assert len(phases) == (2 if i % 3 == 0 else 1), run["id"]
        assert phases[0][0][1] == str(i + 1) and phases[0][1][1] == f"r{i}"
        failures = [json.loads(o)["error"] for _, o in phases[0][2:]]
        assert len(failures) == (i % 5 == 0) + (i % 7 == 0) + (i % 11 == 0)


def test_a_cancelled_run_runs_nothing_and_gets_nothing(stack, state):
    key = uuid.uuid4().hex
    run = state.create_run([[call("count", {"key": key})]])
    state.cancel_run(run["thread_id"], run["id"])
    watch(stack, run)
    wait_for(lambda: not _watched(stack), 15, "the cancelled run to leave the watch list")
    assert state.submits(run["thread_id"], run["id"]) == []
    assert stack.redis().get(f"test:runs:{key}") is None


def test_a_run_expiring_while_a_tool_is_slow_gets_timeout_outputs_before_it_expires(stack, state):
    # A 30 s tool in a run that expires 25 s after creation: TOOLFAN_EXPIRY_MARGIN (15 s)
    # before expires_at the phase is answered, the slow call with a timeout error.
    key = uuid.uuid4().hex
    slow = call("private_long", {"key": key, "seconds": 30}, "call_slow")
    quick = call("add", {"a": 1, "b": 2}, "call_quick")
    run = state.create_run([[slow, quick]], expires_in=25)
    watch(stack, run)
    wait_for(lambda: state.submits(run["thread_id"], run["id"]), 30, "the timeout outputs", 0.2)
    (submit,) = state.submits(run["thread_id"], run["id"])
    assert submit["received_at"] < run["expires_at"]
    got = {o["tool_call_id"]: o["output"] for o in submit["tool_outputs"]}
    assert got["call_quick"] == "3"
    assert "did not finish before" in json.loads(got["call_slow"])["error"]


def test_calls_still_queued_when_their_run_is_cancelled_are_not_run(stack, state):
    # The stack's worker runs 4 calls at a time: of 8 calls of 3 s, 4 start and 4 wait in
    # the queue. The run is cancelled as soon as the first starts; the waiting 4 must not
    # run, and the run gets nothing.
    keys = [uuid.uuid4().hex for _ in range(8)]
    run = state.create_run([[call("slow_count", {"key": k, "seconds": 3}) for k in keys]])
    watch(stack, run)
    client = stack.redis()
    wait_for(lambda: any(client.get(f"test:runs:{k}") for k in keys), 30, "a call to start")
    state.cancel_run(run["thread_id"], run["id"])
    wait_for(lambda: not _watched(stack), 15, "the cancelled run to leave the watch list")
    time.sleep(8)  # the started calls finish; the queued ones are taken and refused
    ran = [k for k in keys if client.get(f"test:runs:{k}")]
    assert 1 <= len(ran) <= 4, f"{len(ran)} of 8 calls ran after the cancel"
    assert state.submits(run["thread_id"], run["id"]) == []


def test_a_run_s_tool_is_told_its_thread_run_assistant_metadata_and_deadline(stack, state):
    key = uuid.uuid4().hex
    run = state.create_run(
        [[call("whoami", {"key": key}, "call_ctx")]],
        assistant_id="asst_ctx",
        metadata={"customer_id": "cus_7"},
    )
    watch(stack, run)
    assert finished(state, run)["status"] == "completed"
    assert outputs(state, run) == [[("call_ctx", "assistants:call_ctx")]]
    (raw,) = stack.redis().lrange(f"test:ctx:{key}", 0, -1)
    seen = json.loads(raw)
    bid = batch_id(run["thread_id"], run["id"])
    assert seen["ids"] == {"thread_id": run["thread_id"], "run_id": run["id"]}
    assert (seen["source"], seen["batch_id"], seen["turn_id"]) == (
        "assistants",
        bid,
        phase_of(["call_ctx"]),
    )
    assert (seen["agent_id"], seen["metadata"], seen["attempt"]) == (
        "asst_ctx",
        {"customer_id": "cus_7"},
        1,
    )
    assert seen["deadline"] == run["expires_at"]
    assert seen["idempotency_key"] == idempotency_key(
        "assistants", bid, seen["turn_id"], "call_ctx"
    )


def _approval_of(stack: RunsStack, call_id: str) -> dict:
    def asked() -> dict | None:
        listed = toolfan(stack, "approvals", "list", "--json")
        found = [json.loads(line) for line in listed.stdout.splitlines()]
        return next((a for a in found if a["call_id"] == call_id), None)

    wait_for(lambda: asked() is not None, 60, "the approval request")
    approval = asked()
    assert approval is not None
    return approval


def test_a_run_s_gated_call_waits_for_a_person_then_runs_once(stack, state):
    key = uuid.uuid4().hex
    gated = call("erase", {"key": key}, "call_gated")
    plain = call("add", {"a": 1, "b": 2}, "call_plain")
    run = state.create_run([[gated, plain]])
    watch(stack, run)
    approval = _approval_of(stack, "call_gated")
    assert approval["source"] == "assistants"
    assert approval["batch_id"] == batch_id(run["thread_id"], run["id"])
    time.sleep(3)  # a look or two at the approval: nothing runs, nothing is submitted
    assert stack.redis().get(f"test:runs:{key}") is None
    assert state.submits(run["thread_id"], run["id"]) == []
    approved = toolfan(stack, "approvals", "approve", approval["id"], "--by", "alice")
    assert approved.returncode == 0, approved.stderr
    assert finished(state, run)["status"] == "completed"
    assert outputs(state, run) == [[("call_gated", "erased 1"), ("call_plain", "3")]]
    assert stack.redis().get(f"test:runs:{key}") == "1"


def test_an_undecided_call_is_answered_before_its_run_expires(stack, state):
    # The default approval timeout (600 s) is far past this run's expires_at (30 s after
    # it was made): the deadline is expires_at less TOOLFAN_EXPIRY_MARGIN (15 s).
    key = uuid.uuid4().hex
    gated = call("erase", {"key": key}, "call_wait")
    run = state.create_run([[gated]], expires_in=30)
    watch(stack, run)
    approval = _approval_of(stack, "call_wait")
    assert approval["deadline"] == pytest.approx(run["expires_at"] - 15, abs=0.01)
    wait_for(lambda: state.submits(run["thread_id"], run["id"]), 40, "the timed-out answer", 0.2)
    (submit,) = state.submits(run["thread_id"], run["id"])
    assert submit["received_at"] < run["expires_at"]
    (output,) = submit["tool_outputs"]
    error = json.loads(output["output"])["error"]
    assert error.startswith("Approval timed out after ") and error.endswith(" s")
    assert stack.redis().get(f"test:runs:{key}") is None
    late = toolfan(stack, "approvals", "approve", approval["id"])
    assert late.returncode == 2 and "timed out before this decision" in late.stderr


def test_a_run_in_flight_is_read_less_and_less_often_not_every_pass(stack, state):
    # The poller passes every 0.3 s; while its phase's call runs (7 s), the run can only
    # be cancelled, fail or expire, so it rests TOOLFAN_RUNS_RECHECK (1 s) after its first
    # read and twice as long after each read under the same claim: reads at about 0, 1, 3
    # and 7 s, not the 23 of one a pass or the 8 of one a second.
    run = state.create_run([[call("slow_count", {"key": uuid.uuid4().hex, "seconds": 7})]])
    watch(stack, run)
    finished(state, run)
    (submit,) = state.submits(run["thread_id"], run["id"])
    path = f"/threads/{run['thread_id']}/runs/{run['id']}"
    reads = [
        r.at
        for r in state.requests(path, method="GET")
        if r.path.endswith(run["id"]) and r.at < submit["received_at"]
    ]
    in_flight = submit["received_at"] - reads[0]
    assert in_flight > 6, reads  # the run was watched while its call ran
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(reads)]
    late = [at for at in reads if at - reads[0] > in_flight / 2]
    assert len(reads) <= 5, (in_flight, gaps)
    assert len(late) <= 2, (in_flight, gaps)  # a read a second: 3 or more


def test_a_run_in_a_model_turn_is_read_as_the_api_asks_not_every_pass(stack, state):
    # The emulator's answers ask for the next read a quarter of a turn later
    # (openai-poll-after-ms, as the SDK's polling reads it): 1 s for a 4 s turn. The poller
    # passes every 0.3 s, so a read a pass would make about 14 reads in the turn between
    # the two phases; as asked, it makes 4 or 5, and still finds the second phase soon.
    default_turn = state.turn_duration
    state.turn_duration = 4.0
    try:
        first, second = call("add", {"a": 1, "b": 2}), call("add", {"a": 3, "b": 4})
        run = state.create_run([[first], [second]])
        watch(stack, run)
        assert finished(state, run)["status"] == "completed"
    finally:
        state.turn_duration = default_turn
    submitted, later = (s["received_at"] for s in state.submits(run["thread_id"], run["id"]))
    path = f"/threads/{run['thread_id']}/runs/{run['id']}"
    reads = [
        r.at
        for r in state.requests(path, method="GET")
        if r.path.endswith(run["id"]) and submitted < r.at < later
    ]
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(reads)]
    assert 2 <= len(reads) <= 7, gaps
    assert later - (submitted + 4.0) < 3.0, gaps  # waiting at +4 s, found within a rest


def test_a_run_in_a_model_turn_rests_as_asked_at_most_the_longest_rest(stack, state):
    # A RunsPoller in this process on the stack's emulator and ledger, default settings.
    from dispatcher.sources.assistants_models import Run
    from dispatcher.sources.assistants_watch import Watch

    made = state.create_run([[call("add", {"a": 1, "b": 2})]])
    read = stack.runs_poller().client.retrieve_run(made["thread_id"], made["id"])
    assert read.poll_after == pytest.approx(state.turn_duration / 4)  # the header, read

    watched = Watch("thread_turn", f"run_{uuid.uuid4().hex}", time.time())
    bid = batch_id(watched.thread_id, watched.run_id)

    def rest(poller, status: str, asked: float | None) -> float:
        """Seconds the run rests after a read that found it so (0: read next pass)."""
        poller.turn_rests.clear()
        poller._rest_turn(
            Run(watched.thread_id, watched.run_id, status, None, (), poll_after=asked)
        )
        if bid not in poller._resting([watched]):
            return 0.0
        return poller.turn_rests[bid] - time.monotonic()

    poller = stack.runs_poller()
    assert rest(poller, "in_progress", 2.5) == pytest.approx(2.5, abs=0.1)
    assert rest(poller, "queued", 3600) == pytest.approx(8, abs=0.1)  # RUNS_RECHECK_MAX
    assert rest(poller, "cancelling", 0.5) == pytest.approx(0.5, abs=0.1)
    assert rest(poller, "in_progress", None) == 0  # nothing asked: read every pass
    assert rest(poller, "requires_action", 5) == 0  # waiting: the poller's own business
    assert rest(poller, "completed", 5) == 0
    assert rest(poller, "in_progress", 5) > 4
    poller.turn_rests[bid] = time.monotonic() - 0.01  # the rest is over
    assert bid not in poller._resting([watched]) and bid not in poller.turn_rests
    assert rest(stack.runs_poller(runs_recheck_max=0), "in_progress", 5) == 0


def test_a_run_in_flight_rests_twice_as_long_after_each_read_under_one_claim(stack, state):
    # A RunsPoller in this process on the stack's ledger (real Redis), default settings.
    # The watch is not stored, so the stack's own poller never sees it; the claims are
    # taken by hand, and the time since the last read is set by hand, so no sleep.
    from dispatcher.sources.assistants_watch import Watch

    poller = stack.runs_poller()
    watched = Watch("thread_resting", f"run_{uuid.uuid4().hex}", time.time())
    bid = batch_id(watched.thread_id, watched.run_id)

    def rests(ago: float) -> bool:
        poller.read_at[bid] = time.monotonic() - ago
        return bid in poller._resting([watched])

    assert not rests(0.1)  # no claim: nothing in flight, read every pass
    assert poller.ledger.claim(bid, "first", 60_000)
    try:
        assert rests(0.9) and not rests(1.1)  # 1 s after the first read; now 2 s
        assert rests(1.9) and not rests(2.1)  # now 4 s
        assert rests(3.9) and not rests(4.1)  # now 8 s, TOOLFAN_RUNS_RECHECK_MAX
        assert rests(7.9) and not rests(8.1)
        assert rests(7.9) and not rests(8.1)  # and no longer
        poller.ledger.release(bid, "first")
        assert not rests(0.1)  # the phase was submitted: read on the next pass
        assert poller.ledger.claim(bid, "second", 60_000)
        assert rests(0.9) and not rests(1.1)  # a new dispatch starts from 1 s again
        assert rests(1.9)
    finally:
        poller.ledger.release(bid, "first")
        poller.ledger.release(bid, "second")
    fixed = stack.runs_poller(runs_recheck_max=1)  # the rest never grows
    watched = Watch("thread_resting", f"run_{uuid.uuid4().hex}", time.time())
    bid = batch_id(watched.thread_id, watched.run_id)
    assert fixed.ledger.claim(bid, "fixed", 60_000)
    try:
        for _ in range(3):
            fixed.read_at[bid] = time.monotonic() - 0.9
            assert bid in fixed._resting([watched])
            fixed.read_at[bid] = time.monotonic() - 1.1
            assert bid not in fixed._resting([watched])
    finally:
        fixed.ledger.release(bid, "fixed")


def test_a_cancel_during_a_long_phase_is_noticed_within_the_recheck(stack, state):
    # Resting runs are still read: a run cancelled 1.5 s into a 10 s call (resting 2 s
    # since its read at 1 s) stops being watched within seconds, not when its phase ends.
    key = uuid.uuid4().hex
    run = state.create_run([[call("slow_count", {"key": key, "seconds": 10})]])
    watch(stack, run)
    client = stack.redis()
    wait_for(lambda: client.get(f"test:runs:{key}"), 30, "the call to start")
    time.sleep(1.5)  # the run has been resting for a while
    state.cancel_run(run["thread_id"], run["id"])
    cancelled = time.monotonic()
    wait_for(lambda: not _watched(stack), 15, "the cancelled run to leave the watch list", 0.1)
    assert time.monotonic() - cancelled < 5  # the call itself still had 8.5 s to go
    assert state.submits(run["thread_id"], run["id"]) == []


def _first_reads(state, runs: list[dict]) -> list[float]:
    """When the API answered each run's first read."""
    firsts = []
    for run in runs:
        path = f"/threads/{run['thread_id']}/runs/{run['id']}"
        reads = state.requests(path, method="GET")
        firsts.append(min(r.at for r in reads if r.path.endswith(run["id"])))
    return firsts


def test_runs_behind_a_slow_api_are_read_together_not_one_after_another(stack, state):
    # Every run read answers 0.3 s late, as an API across a network might: read one after
    # another, 16 runs take 4.8 s a pass, and the last one's calls wait for all of it.
    state.set_faults(latency=0.3, endpoints=["runs"])
    runs = [state.create_run([[call("add", {"a": i, "b": 1}, f"call_far_{i}")]]) for i in range(16)]
    watch(stack, *runs)
    for run in runs:
        finished(state, run)
    firsts = _first_reads(state, runs)
    assert max(firsts) - min(firsts) < 2.5, sorted(round(t - min(firsts), 2) for t in firsts)
    for i, run in enumerate(runs):
        assert outputs(state, run) == [[(f"call_far_{i}", str(i + 1))]]


def test_a_near_api_is_read_one_run_at_a_time_and_a_far_one_several_at_once(stack, state):
    # RunsPoller in this process, on the stack's emulator over HTTP, with default settings;
    # the runs are not watched, so the stack's own poller leaves them alone.
    import threading

    from dispatcher.sources.assistants_client import AssistantsClient
    from dispatcher.sources.assistants_poll import FAR_AFTER
    from dispatcher.sources.assistants_watch import Watch

    readers: list[str] = []

    class Recording(AssistantsClient):
        def retrieve_run(self, thread_id: str, run_id: str):
            readers.append(threading.current_thread().name)
            return super().retrieve_run(thread_id, run_id)

    runs = [state.create_run([[call("add", {"a": i, "b": 2})]]) for i in range(12)]
    watches = [Watch(r["thread_id"], r["id"], time.time()) for r in runs]
    poller = stack.runs_poller(Recording)

    def one_pass() -> list[str]:
        readers.clear()
        got = list(poller._reads(watches))
        assert [w for w, _ in got] == watches  # in order, whoever read them
        assert [r.run_id for _, r in got] == [r["id"] for r in runs]
        return list(readers)

    assert one_pass() == ["MainThread"] * len(runs)
    assert not poller._far
    # Slow answers: FAR_AFTER of them in a row, then the rest of the pass together.
    state.set_faults(latency=0.05, endpoints=["runs"])
    slow = one_pass()
    assert slow[:FAR_AFTER] == ["MainThread"] * FAR_AFTER
    assert {name.split("_")[0] for name in slow[FAR_AFTER:]} == {"toolfan-runs-read"}
    assert poller._far
    # Fewer slow reads than FAR_AFTER (a wake's pass over one new run) tell nothing: the
    # poller stays far, and does not log a change back and forth.
    list(poller._reads(watches[:1]))
    assert poller._far
    # Quick again: the next pass never leaves this thread.
    state.set_faults(latency=0.0, endpoints=["runs"])
    assert one_pass() == ["MainThread"] * len(runs)
    assert not poller._far


def test_a_phase_goes_in_one_submit_and_a_resend_is_settled_by_one_read(stack, state):
    # The run used to be read before every submit: a request per phase that found it
    # waiting in all but the rare resend. The API refuses outputs a run does not wait for,
    # so the run is read only then.
    from dispatcher.sources.assistants import AssistantsSource
    from dispatcher.sources.assistants_client import AssistantsClient
    from dispatcher.sources.assistants_config import load_config

    run = state.create_run([[call("add", {"a": 1, "b": 2}, "call_one")]])
    ids = batch_id(run["thread_id"], run["id"])
    result = {"turn_id": phase_of(["call_one"]), "call_id": "call_one", "success": True}
    with AssistantsClient(load_config(stack.env)) as client:
        source = AssistantsSource(client)
        sent = len(state.requests(run["id"]))
        first = source.deliver(ids, [{**result, "output": "3"}])
        made = [(r.method, r.status) for r in state.requests(run["id"])[sent:]]
        assert made == [("POST", 200)] and first.status == "200"
        assert outputs(state, run) == [[("call_one", "3")]]
        sent = len(state.requests(run["id"]))
        again = source.deliver(ids, [{**result, "output": "3"}])  # a duplicate callback
        made = [(r.method, r.status) for r in state.requests(run["id"])[sent:]]
        assert made == [("POST", 400), ("GET", 200)] and again.status == "past"
    assert outputs(state, run) == [[("call_one", "3")]], "applied once"


def test_a_pass_writes_what_it_saw_of_all_its_runs_in_one_round_trip(
    stack, state, redis_client, monkeypatch
):
    # Watches of its own, out of the stack's poller's sight; runs that end or stay in a
    # turn, so that nothing is dispatched. Each read changes a status or ends a watch:
    # thirty writes, in one pipeline.
    poller = stack.runs_poller(ledger_client=redis_client)
    monkeypatch.setattr(state, "turn_duration", 30.0)
    over = [state.create_run(status="completed") for _ in range(20)]
    busy = [state.create_run(status="in_progress") for _ in range(10)]
    poller.watches.add([(r["thread_id"], r["id"]) for r in over + busy])
    trips: list[tuple[int, int]] = []
    record = poller.watches.record
    monkeypatch.setattr(
        poller.watches,
        "record",
        lambda seen, dropped: (trips.append((len(seen), len(dropped))), record(seen, dropped)),
    )
    summary = poller.poll_once()
    assert (summary.runs_seen, summary.runs_finished) == (30, 20)
    assert [t for t in trips if t != (0, 0)] == [(10, 20)]
    left = poller.watches.all()
    assert sorted(w.run_id for w in left) == sorted(r["id"] for r in busy)
    assert {w.status for w in left} == {"in_progress"}
