"""A CI-sized fuzz run: 150 hostile sessions through a real worker and a real poller.

Same code as ``python -m tests.fuzz``, on its own stack and its own Redis databases (6 and
7), so it needs none of the suite's fixtures and never touches databases 14/15. The plan
test is pure and quick: it proves a run this size holds every kind of hostile input.
"""

import json
import random
import time
from typing import Any

import pytest

from emulator import AcceptedBatch, RequestRecord
from tests.fuzz.ids import FAMILIES, ID_KINDS, Alphabet
from tests.fuzz.kinds import OUTPUT_KINDS
from tests.fuzz.logscan import LogScan, scan
from tests.fuzz.plan import (
    ARG_KINDS,
    NAME_KINDS,
    UNANSWERABLE,
    PlannedCall,
    PlannedSession,
    plan_sessions,
)
from tests.fuzz.report import details, problems
from tests.fuzz.run import FuzzConfig, run_fuzz
from tests.fuzz.verify import verify

CI = FuzzConfig(sessions=150, seed=7, settle_timeout=40.0, stall_timeout=15.0, quiet_period=2.0)


def test_ci_plan_holds_every_kind() -> None:
    plan = plan_sessions(random.Random(CI.seed), CI.sessions, Alphabet(), raw=True)
    labels = {label for s in plan for c in s.calls for label in c.labels}
    wanted = (
        {f"output={k}" for k in OUTPUT_KINDS}
        | {f"args={k}" for k in ARG_KINDS}
        | {f"name={k}" for k in NAME_KINDS}
        | {f"unanswerable={k}" for k in UNANSWERABLE}
        | {f"family={k}" for k in FAMILIES}
        | {f"sid={k}" for k in ID_KINDS}
        | {f"call={k}" for k in ID_KINDS}
    )
    assert wanted <= labels, sorted(wanted - labels)
    ids = [s.session_id for s in plan]
    assert len(set(ids)) == len(ids) == CI.sessions
    assert not {".", "..", ""} & set(ids)


def _call(turn: str, call: str, token: str, expect: str = "any") -> PlannedCall:
    action = {"type": "function_call", "turn_id": turn, "call_id": call, "name": "fuzz_echo"}
    labels = ("output=text",)
    return PlannedCall(turn, call, token, labels, action, None, "fuzz_echo", True, expect)


def _ok(call: PlannedCall, output: str) -> dict[str, Any]:
    event = {"type": "agent.session.input.tool_result", "turn_id": call.turn_id}
    return {**event, "call_id": call.call_id, "success": True, "output": output}


def _batch(sid: str, *events: dict[str, Any]) -> AcceptedBatch:
    return AcceptedBatch(sid, list(events), "key", {}, time.time())


def test_the_checks_count_what_they_say() -> None:
    """Each counter on synthetic batches: the verifier is right before any process runs."""
    a1, a2 = _call("t:x", "c", "fz-" + "a" * 20), _call("t", "x:c", "fz-" + "b" * 20)
    b1, c1 = _call("t", "c", "fz-" + "c" * 20), _call("t", "c", "fz-" + "d" * 20)
    plan = [PlannedSession("a", "", [a1, a2]), PlannedSession("b", "", [b1])]
    d1 = _call("t", "c", "fz-" + "e" * 20, expect="run")
    plan += [PlannedSession("c", "", [c1]), PlannedSession("d", "", [d1])]
    seeded = {s.session_id: time.time() for s in plan}
    batches = [
        _batch("a", _ok(a1, a1.token + " x"), _ok(a2, a1.token + " x")),  # a2 got a1's
        _batch("b", _ok(b1, "no token")),  # success without its own token
        _batch("b", _ok(b1, b1.token)),  # a second batch, answering b1 again
        _batch(
            "d",
            {
                **_ok(d1, ""),
                "success": False,
                "output": None,
                "error": "Invalid arguments for fuzz_echo: x",
            },
        ),
    ]  # d1 got an arguments error although its arguments were valid; c1 never answered
    refused = RequestRecord("POST", "/v1/agents/sessions/c/events", "", {}, 400, "rejected")
    worker_log = '{"level": "ERROR", "logger": "celery.app.trace", "message": "Task toolfan.execute[0a] raised unexpected: X"}'
    logs = scan({"worker": worker_log})
    tally = verify(plan, seeded, batches, [refused], logs, [])
    counts = {
        c: tally.counts[c] for c in ("cross-talk", "lost", "duplicated", "crashes", "refused")
    }
    assert counts == {"cross-talk": 3, "lost": 1, "duplicated": 2, "crashes": 1, "refused": 1}
    right = [_batch("a", _ok(a1, a1.token), _ok(a2, f'["{a2.token}"]'))]
    assert verify(plan[:1], seeded, right, [], LogScan(), []).ok


def test_log_scan_tells_crashes_from_handled_errors() -> None:
    """Errors toolfan logs on purpose are not crashes; a chord broken by a counted task
    failure is the same crash; a chained traceback is one."""
    handled = [
        {"level": "ERROR", "logger": "toolfan.handlers", "message": "x function raised"},
        {
            "level": "ERROR",
            "logger": "toolfan.poll",
            "message": "session_id=a unreadable required action: x",
        },
        {
            "level": "ERROR",
            "logger": "toolfan.submit",
            "message": "session_id=a key=k batch refused for good: HTTP 400",
        },
        {"level": "INFO", "logger": "celery.app.trace", "message": "Task toolfan.submit[1] retry"},
    ]
    crashes = [
        {
            "level": "ERROR",
            "logger": "celery.app.trace",
            "message": "Task toolfan.execute[0a] raised unexpected: E()",
        },
        {
            "level": "ERROR",
            "logger": "celery.backends.redis",
            "message": "Chord 'c1' raised: ChordError(\"Dependency 0a raised E()\")",
        },
        {
            "level": "ERROR",
            "logger": "celery.worker",
            "message": "Process 'ForkPoolWorker-1' exited with 'signal 11 (SIGSEGV)'",
        },
    ]
    chained = [
        "Traceback (most recent call last):",
        '  File "/x/dispatcher/client.py", line 1, in _json',
        "ValueError: a",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/x/dispatcher/loop.py", line 2, in run_once',
        "RecursionError: b",
        "toolfan: poll failed: UnexpectedResponseError: the answer is not JSON",
        json.dumps(
            {"level": "ERROR", "logger": "toolfan.poll", "message": "poll pass failed unexpectedly"}
        ),
        "toolfan: poll failed: UnicodeEncodeError: surrogates not allowed",  # the same pass
    ]
    text = "\n".join([*(json.dumps(r) for r in handled + crashes), *chained])
    found = scan({"worker": text})
    assert [c.what.split(":")[0] for c in found.crashes] == [
        "task toolfan.execute raised unexpected",
        "celery.worker",
        "uncaught",
        "toolfan",
        "toolfan.poll",
    ]
    assert found.crashes[2].where == "dispatcher/loop.py:2 in run_once"
    assert list(found.refusals) == ["k"]


@pytest.mark.timeout(100)
def test_fuzz_run_mixes_up_loses_duplicates_crashes_and_refuses_nothing() -> None:
    result = run_fuzz(CI, progress=print)
    tally = result.tally
    print(tally.line())
    print(details(tally, CI.seed, result.elapsed, result.faults, result.skipped))
    if not tally.ok:
        lines: list[str] = []
        problems(tally, result.plan, out=lines.append)
        pytest.fail("\n".join([tally.line(), *lines, f"logs: {result.logs}"]), pytrace=False)
    assert tally.sessions == CI.sessions
    assert tally.answerable > 400
