"""Authorization in ``execute_call``, on a real Redis: what a policy denies never runs.

The policy decides after the arguments validate, before the tool runs; each test counts
the tool's side effect. (The agent's declared tools are enforced at dispatch:
``tests/e2e/test_authorization.py``.)
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from handlers import Deny, Outcome, Registry
from tasks.envelope import Envelope
from tasks.execute import execute_call
from tasks.ledger import CallRef, Ledger
from tasks.settings import get_settings
from tests import policies


@pytest.fixture
def reg(runs) -> Registry:
    reg = Registry()

    @reg.tool
    def delete_user(user_id: str) -> str:
        """Delete a user."""
        runs.append(f"deleted {user_id}")
        return "deleted"

    @reg.tool(authorize=policies.allow_everything)
    def delete_draft(draft_id: str) -> str:
        """Delete a draft: its own policy allows it, whatever TOOLFAN_POLICY says."""
        runs.append(f"deleted draft {draft_id}")
        return "deleted"

    @reg.tool(authorize=policies.broken)
    def rename(user_id: str, name: str) -> str:
        """Rename a user, under a policy that raises."""
        runs.append(f"renamed {user_id}")
        return "renamed"

    @reg.tool(authorize=lambda name, args, ctx: Deny(f"limit {args['amount']} > 100"))
    def pay(amount: int) -> str:
        """Pay: its policy sees the validated arguments."""
        runs.append(f"paid {amount}")
        return "paid"

    return reg


@pytest.fixture
def global_policy(monkeypatch):
    """``TOOLFAN_POLICY=tests.policies:deny_deletes`` for this test."""
    monkeypatch.setattr("tasks.execute.get_policy", lambda: policies.deny_deletes)


def call(ledger: Ledger, reg: Registry, name: str, arguments: Any, **envelope: Any):
    ref = CallRef(f"sess_{uuid.uuid4().hex[:8]}", "turn_1", "call_1")
    env = Envelope("agents", ref.batch_id, ref.call_id, name, arguments, ref.turn_id, **envelope)
    return execute_call(ref, name, arguments, ledger, reg, envelope=env)


@pytest.mark.usefixtures("global_policy")
def test_the_global_policy_denies_and_the_tool_never_runs(ledger, reg, runs):
    result = call(ledger, reg, "delete_user", {"user_id": "u1"})
    assert (result.success, result.outcome) == (False, Outcome.DENIED)
    assert result.error == "Not authorized: delete_user needs an admin session"
    assert runs == []
    admin = call(ledger, reg, "delete_user", {"user_id": "u1"}, metadata={"role": "admin"})
    assert admin.success and runs == ["deleted u1"]  # it reads the session's metadata


@pytest.mark.usefixtures("global_policy")
def test_a_tool_s_own_policy_wins_over_the_global_one(ledger, reg, runs):
    assert call(ledger, reg, "delete_draft", {"draft_id": "d1"}).success
    assert runs == ["deleted draft d1"]


def test_a_raising_policy_denies(ledger, reg, runs):
    result = call(ledger, reg, "rename", {"user_id": "u1", "name": "x"})
    assert result.outcome is Outcome.DENIED and runs == []
    assert result.error == "Not authorized: the authorization policy failed (KeyError)"


def test_the_policy_decides_on_validated_arguments_only(ledger, reg, runs):
    refused = call(ledger, reg, "pay", {"amount": "not a number"})
    assert refused.outcome is Outcome.INVALID_ARGUMENTS  # validation first
    denied = call(ledger, reg, "pay", {"amount": 500})
    assert denied.error == "Not authorized: limit 500 > 100" and runs == []


def test_a_denial_is_saved_so_a_redelivery_is_denied_without_asking_again(ledger, reg, runs):
    ref = CallRef("sess_again", "turn_1", "call_1")
    env = Envelope("agents", ref.batch_id, ref.call_id, "pay", {"amount": 500}, ref.turn_id)
    first = execute_call(ref, "pay", {"amount": 500}, ledger, reg, envelope=env)
    again = execute_call(ref, "pay", {"amount": 500}, ledger, reg, envelope=env)
    assert first.error == again.error and runs == []
    assert ledger.saved(ref) is not None


def test_without_any_policy_everything_registered_runs(ledger, reg, runs):
    assert get_settings().policy is None
    assert call(ledger, reg, "delete_user", {"user_id": "u2"}).success
    assert runs == ["deleted u2"]
