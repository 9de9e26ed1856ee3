"""execute_call against a real Redis, without Celery: the ledger decides what runs."""

import threading
import time
import uuid

import pytest

from handlers import RUN_AGAIN, Outcome, Registry
from tasks import metrics
from tasks.execute import execute_call
from tasks.ledger import CallRef, Ledger, LedgerError
from tasks.settings import get_settings
from tests.services import AofRedis


@pytest.fixture
def reg(runs) -> Registry:
    reg = Registry()

    @reg.tool
    def note(text: str) -> str:
        """Idempotent."""
        runs.append(text)
        return f"noted {text}"

    @reg.tool(idempotent=False)
    def pay(amount: int) -> str:
        """Non-idempotent, no hook."""
        runs.append(f"pay {amount}")
        return "paid"

    def check(args):
        return (
            {"found": args.amount} if any(r == f"send {args.amount}" for r in runs) else RUN_AGAIN
        )

    @reg.tool(idempotent=False, reconcile=check)
    def send(amount: int) -> str:
        """Non-idempotent, with a hook."""
        runs.append(f"send {amount}")
        return "sent"

    return reg


def ref() -> CallRef:
    return CallRef(f"sess_{uuid.uuid4().hex[:8]}", "turn_1", "call_1")


def test_second_execution_returns_saved_result_without_running(reg, ledger, runs):
    r = ref()
    first = execute_call(r, "note", {"text": "hi"}, ledger, reg)
    second = execute_call(r, "note", {"text": "hi"}, ledger, reg)
    assert first == second and first.output == "noted hi"
    assert runs == ["hi"]


def test_failures_are_saved_too(reg, ledger, runs):
    r = ref()
    first = execute_call(r, "note", {"text": 5}, ledger, reg)
    assert first.outcome is Outcome.INVALID_ARGUMENTS
    assert execute_call(r, "note", {"text": "now valid"}, ledger, reg) == first
    assert runs == []


def test_idempotent_tool_started_without_result_runs_again(reg, ledger, runs):
    r = ref()
    ledger.begin(r, "note")  # an earlier attempt crashed after starting
    assert execute_call(r, "note", {"text": "x"}, ledger, reg).output == "noted x"
    assert runs == ["x"]


def test_non_idempotent_without_hook_is_not_rerun(reg, ledger, runs):
    r = ref()
    ledger.begin(r, "pay")
    result = execute_call(r, "pay", {"amount": 5}, ledger, reg)
    assert result.outcome is Outcome.OUTCOME_UNKNOWN
    assert result.error == "Function 'pay' may already have run; its outcome is unknown"
    assert runs == []
    assert ledger.record(r).result == result


def test_non_idempotent_first_attempt_runs(reg, ledger, runs):
    assert execute_call(ref(), "pay", {"amount": 5}, ledger, reg).output == "paid"
    assert runs == ["pay 5"]


def test_reconcile_hook_answers_or_lets_it_run(reg, ledger, runs):
    crashed_before = ref()
    ledger.begin(crashed_before, "send")
    assert execute_call(crashed_before, "send", {"amount": 7}, ledger, reg).output == "sent"
    assert runs == ["send 7"]

    crashed_after = CallRef(crashed_before.batch_id, "turn_1", "call_2")
    ledger.begin(crashed_after, "send")
    result = execute_call(crashed_after, "send", {"amount": 7}, ledger, reg)
    assert result.output == '{"found":7}'
    assert runs == ["send 7"]


def test_unknown_function_is_answered_and_saved(reg, ledger):
    r = ref()
    result = execute_call(r, "launch", {}, ledger, reg)
    assert result.outcome is Outcome.UNKNOWN_FUNCTION
    assert ledger.record(r).result == result


def test_result_survives_a_redis_restart_during_the_call(tmp_path):
    """Redis goes down while the function runs: the result is saved once it is back, and the
    function is not run again (a lost result would make the redelivered task run it twice)."""
    server = AofRedis(tmp_path / "redis")
    ledger = Ledger.from_url(f"{server.url}/0", ttl=3600, source="agents")
    runs: list[str] = []
    reg = Registry()

    @reg.tool(timeout=5)
    def work(text: str) -> str:
        """Takes Redis down, and has it restarted a moment later."""
        runs.append(text)
        server.stop()
        threading.Timer(0.6, server.restart_stopped).start()
        return f"done {text}"

    errors = metrics.LEDGER_ERRORS._value.get()
    try:
        r = ref()
        result = execute_call(r, "work", {"text": "x"}, ledger, reg)
        assert result.output == "done x" and runs == ["x"]
        assert metrics.LEDGER_ERRORS._value.get() > errors  # each failed save is counted
        record = ledger.record(r)
        assert record is not None and record.state == "done" and record.result == result
        assert execute_call(r, "work", {"text": "x"}, ledger, reg) == result
        assert runs == ["x"]
    finally:
        server.stop()


def test_result_save_gives_up_at_the_hard_limit(tmp_path, monkeypatch):
    """A ledger that stays down: execute_call raises instead of waiting past the time limit."""
    monkeypatch.setenv("TOOLFAN_TIME_LIMIT_GRACE", "1")
    get_settings.cache_clear()
    server = AofRedis(tmp_path / "redis")
    ledger = Ledger.from_url(f"{server.url}/0", ttl=3600, source="agents")
    reg = Registry()

    @reg.tool(timeout=0.5)
    def work() -> str:
        """Takes Redis down for good."""
        server.stop()
        return "done"

    started = time.perf_counter()
    try:
        with pytest.raises(LedgerError):
            execute_call(ref(), "work", {}, ledger, reg)
    finally:
        get_settings.cache_clear()
    assert time.perf_counter() - started < 1.5  # the hard limit: 0.5 s timeout + 1 s grace
