"""execute_call against a real Redis, without Celery: the ledger decides what runs."""

import uuid

import pytest

from handlers import RUN_AGAIN, Outcome, Registry
from tasks.execute import execute_call
from tasks.ledger import CallRef, Ledger


@pytest.fixture
def ledger(redis_client) -> Ledger:
    return Ledger(redis_client, ttl=3600)


@pytest.fixture
def runs() -> list[str]:
    return []


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

    crashed_after = CallRef(crashed_before.session_id, "turn_1", "call_2")
    ledger.begin(crashed_after, "send")
    result = execute_call(crashed_after, "send", {"amount": 7}, ledger, reg)
    assert result.output == '{"found":7}'
    assert runs == ["send 7"]


def test_unknown_function_is_answered_and_saved(reg, ledger):
    r = ref()
    result = execute_call(r, "launch", {}, ledger, reg)
    assert result.outcome is Outcome.UNKNOWN_FUNCTION
    assert ledger.record(r).result == result
