"""Authorization policies: their decisions, and how a broken one fails closed."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from handlers import Allow, CallContext, Deny, Registry, RegistryError
from handlers.policy import MAX_REASON_CHARS, decide, load_policy

CTX = CallContext(source="agents", batch_id="s", turn_id="t", call_id="c", function="f")


def test_allow_and_deny_are_the_policy_s_own_words():
    assert decide(lambda name, args, ctx: Allow(), "f", {}, CTX) == Allow()
    said = decide(
        lambda name, args, ctx: Deny(f"{name} needs {args['who']}"), "f", {"who": "x"}, CTX
    )
    assert said == Deny("f needs x")


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (lambda n, a, c: 1 / 0, "the authorization policy failed (ZeroDivisionError)"),
        (lambda n, a, c: None, "the authorization policy gave no decision"),
        (lambda n, a, c: True, "the authorization policy gave no decision"),
        (lambda n, a, c: "allow", "the authorization policy gave no decision"),
        (lambda n, a, c: Deny(""), "denied by policy"),
        (lambda n, a, c: Deny(42), "denied by policy"),  # type: ignore[arg-type]
    ],
)
def test_a_policy_that_cannot_decide_denies(policy: Any, reason: str, caplog):
    caplog.set_level(logging.ERROR, "toolfan.policy")
    assert decide(policy, "delete_user", {}, CTX) == Deny(reason)


def test_a_raising_policy_is_logged_with_its_traceback(caplog):
    def broken(name: str, args: Any, ctx: CallContext) -> Allow:
        raise KeyError("role")

    caplog.set_level(logging.ERROR, "toolfan.policy")
    decide(broken, "delete_user", {}, CTX)
    (record,) = caplog.records
    assert "'delete_user' raised KeyError; the call is denied" in record.getMessage()
    assert record.exc_info is not None


def test_a_long_reason_is_cut():
    denied = decide(lambda n, a, c: Deny("x" * 100_000), "f", {}, CTX)
    assert isinstance(denied, Deny) and len(denied.reason) <= MAX_REASON_CHARS + 100


def test_toolfan_policy_names_a_function_or_the_start_fails():
    assert load_policy("tests.policies:deny_deletes").__name__ == "deny_deletes"
    for spec, match in (
        ("tests.policies", "expected module:function"),
        ("tests.no_such_module:f", "cannot load"),
        ("tests.policies:missing", "cannot load"),
        ("tests.policies:NOT_CALLABLE", "is not callable"),
    ):
        with pytest.raises(RegistryError, match=match):
            load_policy(spec)


def test_a_tool_s_authorize_must_be_a_plain_function():
    reg = Registry()

    async def later(name: str, args: Any, ctx: CallContext) -> Allow:
        return Allow()

    with pytest.raises(RegistryError, match="authorize must be a plain"):

        @reg.tool(authorize=later)
        def f() -> None:
            """F."""
