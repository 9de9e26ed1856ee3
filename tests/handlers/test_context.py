"""``CallContext``: given to the tools that ask for it, in no schema, current while they run."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from handlers import CallContext, Registry, RegistryError, call_context, idempotency_key
from handlers.context import KEY_PREFIX, frozen
from handlers.runner import run_call, run_reconcile
from handlers.tool import RUN_AGAIN

IDS = {"session_id": "s1", "turn_id": "t1", "call_id": "c1", "function": "x"}
CTX = CallContext(
    source="agents",
    batch_id="sess_1",
    turn_id="turn_1",
    call_id="call_1",
    function="refund",
    agent_id="agent_1",
    metadata=frozen({"customer_id": "cus_9"}),
    attempt=2,
    deadline=1_800_000_000.0,
    idempotency_key=idempotency_key("agents", "sess_1", "turn_1", "call_1"),
    ids=frozen({"session_id": "sess_1"}),
)


class Order(BaseModel):
    order_id: str


def test_a_context_parameter_is_in_no_schema_and_gets_the_call_s_context():
    reg = Registry()

    @reg.tool
    def refund(order_id: str, ctx: CallContext) -> str:
        """Refund an order."""
        return f"{order_id} for {ctx.metadata['customer_id']} key {ctx.idempotency_key}"

    tool = reg.get("refund")
    assert tool is not None
    schema = tool.parameters_schema()
    assert list(schema["properties"]) == ["order_id"] and schema["required"] == ["order_id"]
    assert "ctx" not in json.dumps(tool.definition())
    result = run_call(tool, tool.parse({"order_id": "o1"}), IDS, call_context=CTX)
    assert result.output == f"o1 for cus_9 key {CTX.idempotency_key}"
    # the model cannot supply it: it is not an argument
    refused = tool.parse
    with pytest.raises(ValueError, match="ctx"):
        refused({"order_id": "o1", "ctx": {"metadata": {"customer_id": "cus_1"}}})


def test_a_model_parameter_and_an_optional_context_work_together():
    reg = Registry()

    @reg.tool
    def ship(order: Order, ctx: CallContext | None = None) -> str:
        """Ship an order."""
        return f"{order.order_id}:{ctx.attempt if ctx else 'no context'}"

    tool = reg.get("ship")
    assert tool is not None and tool.args.model is Order
    assert run_call(tool, tool.parse({"order_id": "o2"}), IDS, call_context=CTX).output == "o2:2"
    assert ship(Order(order_id="o3")) == "o3:no context"  # still a plain function


def test_two_context_parameters_are_refused_at_registration():
    reg = Registry()
    with pytest.raises(RegistryError, match="one CallContext parameter at most"):

        @reg.tool
        def twice(a: CallContext, b: CallContext) -> None:
            """Twice."""


def test_call_context_is_current_in_sync_and_async_tools_and_in_reconcile_hooks():
    reg = Registry()

    @reg.tool
    def plain() -> str:
        """Plain."""
        return call_context().call_id

    @reg.tool
    async def awaited() -> str:
        """Async."""
        await asyncio.sleep(0)
        inner = await asyncio.create_task(_in_a_task())
        return f"{call_context().batch_id}/{inner}"

    def reconcile(args: BaseModel) -> object:
        return call_context().idempotency_key

    @reg.tool(idempotent=False, reconcile=reconcile)
    def once() -> str:
        """Once."""
        return "ran"

    for name, expected in (("plain", "call_1"), ("awaited", "sess_1/turn_1")):
        tool = reg.get(name)
        assert tool is not None
        assert run_call(tool, tool.parse({}), IDS, call_context=CTX).output == expected
    tool = reg.get("once")
    assert tool is not None
    reconciled = run_reconcile(tool, tool.parse({}), IDS, call_context=CTX)
    assert reconciled is not None and reconciled.output == CTX.idempotency_key
    with pytest.raises(LookupError, match="no toolfan call is running here"):
        call_context()


async def _in_a_task() -> str:
    return call_context().turn_id


def test_the_context_is_read_only():
    with pytest.raises(AttributeError):
        CTX.attempt = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        CTX.metadata["customer_id"] = "cus_1"  # type: ignore[index]
    assert CTX.session_id == "sess_1" and CTX.thread_id is None and CTX.run_id is None


@pytest.mark.parametrize(
    "ids",
    [
        ("agents", "sess_1", "turn_1", "call_1"),
        ("assistants", '["thread_1","run_1"]', "phase_1", "call_\n\u2028\x00" + "x" * 10_000),
        ("inline", "", "", ""),
    ],
)
def test_an_idempotency_key_is_stable_plain_and_short_for_any_ids(ids):
    key = idempotency_key(*ids)
    assert key == idempotency_key(*ids)
    assert key.startswith(KEY_PREFIX) and len(key) == len(KEY_PREFIX) + 64
    assert key.isascii() and key.replace("-", "").isalnum()
    other = (ids[0], ids[1], ids[2], ids[3] + "2")
    assert idempotency_key(*other) != key
    # the identity's parts cannot run into each other
    assert idempotency_key("a", "b|c", "", "") != idempotency_key("a", "b", "|c", "")


def test_an_sdk_function_tool_reads_the_context_while_it_runs():
    from openai.lib.beta.agents import function_tool

    @function_tool
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"{order_id}@{call_context().metadata['customer_id']}"

    reg = Registry()
    tool = reg.tool(lookup)
    assert run_call(tool, tool.parse({"order_id": "o4"}), IDS, call_context=CTX).output == (
        "o4@cus_9"
    )


def test_a_reconcile_hook_given_the_context_still_says_run_again():
    reg = Registry()

    @reg.tool(idempotent=False, reconcile=lambda args: RUN_AGAIN)
    def again() -> str:
        """Again."""
        return "ran"

    tool = reg.get("again")
    assert tool is not None
    assert run_reconcile(tool, tool.parse({}), IDS, call_context=CTX) is None
