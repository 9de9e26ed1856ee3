import asyncio
import logging
import time

import pytest
from pydantic import BaseModel

from handlers import RUN_AGAIN, Outcome, Registry, ToolError
from handlers.result import CallResult
from handlers.runner import (
    outcome_unknown,
    parse_arguments,
    run_call,
    run_reconcile,
    unknown_function,
)

CTX = {"session_id": "s1", "turn_id": "t1", "call_id": "c1", "function": "x"}


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @reg.tool
    def kaboom() -> None:
        """Raise."""
        raise RuntimeError("kaboom")

    @reg.tool
    def refuse() -> None:
        """Refuse."""
        raise ToolError("No customer with id 9. Known ids: 1, 2")

    @reg.tool(timeout=0.2)
    def slow() -> str:
        """Slow."""
        time.sleep(2)
        return "late"

    @reg.tool(timeout=0.2)
    async def slow_async() -> str:
        """Slow, async."""
        await asyncio.sleep(2)
        return "late"

    @reg.tool
    async def fast_async(x: int) -> dict:
        """Fast, async."""
        await asyncio.sleep(0)
        return {"x": x}

    @reg.tool(max_output_chars=100)
    def chatty() -> str:
        """Talks a lot."""
        return "z" * 1000

    @reg.tool
    def weird() -> object:
        """Returns something that is not JSON."""
        return object()

    return reg


def run(reg: Registry, name: str, arguments) -> CallResult:
    tool = reg.get(name)
    if tool is None:
        return unknown_function(reg, name)
    args = parse_arguments(tool, arguments, CTX)
    return args if isinstance(args, CallResult) else run_call(tool, args, CTX)


def test_ok_output_is_serialized(reg):
    assert run(reg, "add", {"a": 1, "b": 2}) == CallResult.ok("3")
    assert run(reg, "add", '{"a": 1, "b": 2}').output == "3"
    assert run(reg, "fast_async", {"x": 5}).output == '{"x":5}'


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"a": 1, "b": "x"}, "Invalid arguments for add: b: Input should be a valid integer"),
        ({"a": 1}, "Invalid arguments for add: b: Field required"),
        ({"a": 1, "b": 2, "c": 3}, "Invalid arguments for add: c: Extra inputs are not permitted"),
        ([1, 2], "Invalid arguments for add: expected a JSON object, got an array"),
        ("[1, 2]", "Invalid arguments for add: expected a JSON object, got an array"),
        ("{nope", "Invalid arguments for add: not valid JSON"),
        (None, "Invalid arguments for add: expected a JSON object, got null"),
    ],
)
def test_invalid_arguments_name_each_field(reg, arguments, message):
    result = run(reg, "add", arguments)
    assert not result.success
    assert result.outcome is Outcome.INVALID_ARGUMENTS
    assert result.error.startswith(message)


def test_both_invalid_fields_are_named(reg):
    error = run(reg, "add", {"a": "x", "b": "y"}).error
    assert "a: Input should be a valid integer" in error
    assert "b: Input should be a valid integer" in error


def test_unknown_function_lists_available(reg):
    result = run(reg, "nope", {})
    assert result.outcome is Outcome.UNKNOWN_FUNCTION
    assert result.error.startswith("Unknown function 'nope'. Available: add, chatty, fast_async")


def test_tool_error_message_passes_verbatim(reg):
    result = run(reg, "refuse", {})
    assert (result.success, result.outcome) == (False, Outcome.TOOL_ERROR)
    assert result.error == "No customer with id 9. Known ids: 1, 2"


def test_exception_message_has_no_traceback_but_log_does(reg, caplog):
    with caplog.at_level(logging.INFO, logger="toolfan.handlers"):
        result = run(reg, "kaboom", {})
    assert result.error == "Function 'kaboom' failed: RuntimeError: kaboom"
    assert result.outcome is Outcome.EXCEPTION
    record = next(r for r in caplog.records if r.levelno == logging.ERROR)
    assert record.exc_info is not None
    assert "Traceback" in caplog.text and "session_id=s1" in caplog.text
    assert record.call_id == "c1"


@pytest.mark.parametrize("name", ["slow", "slow_async"])
def test_timeouts(reg, name):
    started = time.monotonic()
    result = run(reg, name, {})
    assert time.monotonic() - started < 1.5
    assert result.outcome is Outcome.TIMEOUT
    assert result.error == f"Function '{name}' timed out after 0.2 s"


def test_long_output_is_cut_with_marker(reg):
    out = run(reg, "chatty", {}).output
    assert len(out) <= 100 and "1000 characters" in out


def test_unserializable_output_fails_cleanly(reg):
    result = run(reg, "weird", {})
    assert result.outcome is Outcome.BAD_OUTPUT
    assert "Function 'weird' returned an unusable output" in result.error


class Pay(BaseModel):
    ref: str


def test_reconcile_decides():
    reg = Registry()
    done: set[str] = set()

    def check(args: Pay):
        return {"paid": args.ref} if args.ref in done else RUN_AGAIN

    @reg.tool(idempotent=False, reconcile=check)
    def pay(args: Pay) -> str:
        """Pay."""
        return "paid"

    @reg.tool(idempotent=False)
    def pay_blind(args: Pay) -> str:
        """Pay without a hook."""
        return "paid"

    tool = reg.get("pay")
    assert run_reconcile(tool, Pay(ref="a"), CTX) is None
    done.add("a")
    assert run_reconcile(tool, Pay(ref="a"), CTX) == CallResult.ok('{"paid":"a"}')
    blind = reg.get("pay_blind")
    assert run_reconcile(blind, Pay(ref="a"), CTX) == outcome_unknown(blind)
    assert (
        outcome_unknown(blind).error
        == "Function 'pay_blind' may already have run; its outcome is unknown"
    )
