"""Tools made with the official SDK's Agents helpers register and run like ``@tool`` ones.

Calls go through ``tasks.execute._produce``, what the worker's ``execute`` task runs for a
call once its ledger entry is claimed: lookup, validation, then the runner.
"""

import asyncio
import logging
import subprocess
import sys
import types

import pytest
from openai.lib.beta.agents import FunctionTool, function_tool, pydantic_function_tool
from pydantic import BaseModel

import tests.sdk_tools as sdk
from handlers import CallContext, Outcome, Registry, RegistryError, registry, tool_definitions
from handlers.schema import strict_parameters_schema
from tasks.execute import _produce
from tests.services import ROOT

CTX = {"session_id": "s1", "turn_id": "t1", "call_id": "c1", "function": "x"}
MODULE = "tests.sdk_tools"
LOADED = ["sdk_echo", "sdk_lookup", "sdk_weather"]


@pytest.fixture
def reg() -> Registry:
    """A fresh registry of the module: its module-level SDK tools, with default options."""
    reg = Registry()
    reg.load([MODULE])
    return reg


@pytest.fixture
def fleet() -> Registry:
    """The process-wide registry, as a worker with the module in TOOLFAN_HANDLERS has it."""
    registry.load([MODULE])
    return registry


def run(reg: Registry, name: str, arguments):
    call = CallContext(source="agents", batch_id="s1", turn_id="t1", call_id="c1", function=name)
    return _produce(name, arguments, 1, reg, CTX, None, call)


def test_load_registers_module_level_sdk_tools(reg):
    assert reg.names() == LOADED
    weather = reg.get("sdk_weather")
    assert (weather.queue, weather.timeout, weather.origin) == (
        "fn.sdk_weather",
        60.0,
        sdk.sdk_weather,
    )
    assert weather.description == "Synthetic forecast for a city."
    assert reg.get("sdk_echo").is_async and not weather.is_async
    reg.load([MODULE])
    assert reg.names() == LOADED


def test_a_wrapped_sdk_tool_keeps_its_options_and_is_not_registered_twice(fleet):
    nap = fleet.get("sdk_nap")
    assert nap is sdk.sdk_nap and nap.timeout == 0.5
    assert {"sdk_echo", "sdk_lookup", "sdk_nap", "sdk_weather"} <= set(fleet.names())


def _echo(q: str) -> str:
    return q


def test_load_skips_an_sdk_tool_registered_under_another_name(monkeypatch):
    module = types.ModuleType("tests.fake_sdk_module")
    module.lookup = function_tool(_echo, name="lookup", description="L.")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    reg = Registry()
    reg.tool(name="find_order", timeout=3)(module.lookup)
    reg.load([module.__name__])
    assert reg.names() == ["find_order"] and reg.get("find_order").timeout == 3


def test_tool_accepts_an_sdk_tool_with_options():
    reg = Registry()
    bare = reg.tool(sdk.sdk_weather)
    assert (bare.name, bare.queue) == ("sdk_weather", "fn.sdk_weather")
    other = reg.tool(name="echo2", description="Echo.", queue="fn.io", max_output_chars=100)(
        sdk.sdk_echo
    )
    assert (other.name, other.description, other.queue, other.max_output_chars) == (
        "echo2",
        "Echo.",
        "fn.io",
        100,
    )
    with pytest.raises(RegistryError, match="two tools are named 'sdk_weather'"):

        @reg.tool
        def sdk_weather() -> None:
            """Another function under the SDK tool's name."""


def test_defer_loading_comes_from_the_sdk_tool_unless_given():
    deferred = function_tool(_echo, name="find", description="F.", defer_loading=True)
    reg = Registry()
    assert reg.tool(deferred).defer_loading is True
    assert reg.tool(name="find_now", defer_loading=False)(deferred).defer_loading is False
    assert reg.agent_tools()[-1] == {"type": "tool_search"}


@pytest.mark.parametrize("name", LOADED)
def test_the_agents_form_is_the_sdks_definition(reg, name):
    sdk_tool = getattr(sdk, name)
    definition = tool_definitions("agents", reg)[LOADED.index(name)]
    assert definition == {**sdk_tool.definition, "defer_loading": False}
    assert list(definition) == ["type", "name", "description", "parameters", "defer_loading"]
    assert definition["parameters"] == sdk_tool.definition["parameters"]


@pytest.mark.parametrize("api", ["responses", "chat", "assistants"])
def test_strict_forms_come_from_the_sdk_tools_model(reg, api):
    for definition, name in zip(tool_definitions(api, reg), LOADED, strict=True):
        function = definition.get("function", definition)
        assert function["name"] == name and function["strict"] is True
        assert function["parameters"] == strict_parameters_schema(getattr(sdk, name)._model)
    weather = tool_definitions(api, reg)[2].get("function", tool_definitions(api, reg)[2])
    params = weather["parameters"]
    assert params["required"] == ["city", "unit", "days"]
    assert params["properties"]["days"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}


def test_outputs_go_through_the_sdks_conversion_then_ours(reg):
    assert run(reg, "sdk_weather", {"city": "Oslo"}).output == (
        '{"city":"Oslo","unit":"celsius","days":1}'
    )
    assert run(reg, "sdk_weather", '{"city": "Oslo", "unit": null, "days": 3}').output == (
        '{"city":"Oslo","unit":"celsius","days":3}'
    )
    assert run(reg, "sdk_lookup", {"order_id": "7"}).output == (
        '{"id":"7","status":"shipped","verbose":false}'
    )
    assert run(reg, "sdk_echo", {"text": "hi", "delay": None}).output == "hi"
    parts = run(reg, "sdk_echo", {"text": "hi", "parts": True}).to_json_dict()["output"]
    assert parts == [{"type": "input_text", "text": "hi"}]
    none = run(reg, "sdk_echo", {"text": ""})
    assert (none.success, none.output) == (True, "")


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        (
            "sdk_weather",
            {"unit": "kelvin"},
            "Invalid arguments for sdk_weather: city: Field required",
        ),
        ("sdk_weather", {"city": "x", "hail": 1}, "hail: Extra inputs are not permitted"),
        ("sdk_weather", {"city": None}, "city: Input should be a valid string"),
        ("sdk_lookup", {"order_id": ""}, "order_id: String should have at least 1 character"),
        ("sdk_echo", "{nope", "Invalid arguments for sdk_echo: not valid JSON"),
    ],
)
def test_invalid_arguments_are_our_usual_error(reg, name, arguments, message):
    result = run(reg, name, arguments)
    assert (result.success, result.outcome) == (False, Outcome.INVALID_ARGUMENTS)
    assert message in result.error


def test_exceptions_and_unconvertible_outputs(reg, caplog):
    with caplog.at_level(logging.ERROR, logger="toolfan.handlers"):
        failed = run(reg, "sdk_weather", {"city": "Atlantis"})
    assert failed.outcome is Outcome.EXCEPTION
    assert failed.error == "Function 'sdk_weather' failed: LookupError: no forecast for Atlantis"
    assert "Traceback" in caplog.text and "call_id=c1" in caplog.text
    bad = run(reg, "sdk_lookup", {"order_id": "nan"})
    assert bad.outcome is Outcome.BAD_OUTPUT
    assert bad.error.startswith("Function 'sdk_lookup' returned an unusable output: the SDK")


def test_sync_and_async_timeouts(fleet):
    nap = run(fleet, "sdk_nap", {"seconds": 3})
    assert (nap.outcome, nap.error) == (Outcome.TIMEOUT, "Function 'sdk_nap' timed out after 0.5 s")
    assert run(fleet, "sdk_nap", {"seconds": 0}).output == "awake"
    reg = Registry()
    reg.tool(timeout=0.2)(sdk.sdk_echo)
    slow = run(reg, "sdk_echo", {"text": "late", "delay": 3})
    assert (slow.outcome, slow.error) == (
        Outcome.TIMEOUT,
        "Function 'sdk_echo' timed out after 0.2 s",
    )


def test_output_limits_apply(reg):
    limited = Registry()
    limited.tool(max_output_chars=100)(sdk.sdk_echo)
    out = run(limited, "sdk_echo", {"text": "z" * 1000}).output
    assert len(out) <= 100 and "1000 characters" in out


def test_a_registered_sdk_tool_stays_callable_as_the_sdk_tool(reg):
    assert reg.get("sdk_weather")({"city": "x"}) == sdk.sdk_weather({"city": "x"})
    assert asyncio.run(reg.get("sdk_echo")({"text": "a"})) == "a"
    assert sdk.sdk_nap({"seconds": 0}) == "awake"


class Query(BaseModel):
    q: str


def test_a_plain_function_tool_and_an_overriding_subclass():
    class Shouting(FunctionTool):
        def __call__(self, arguments):
            return str(super().__call__(arguments)).upper()

    plain = FunctionTool(Query, lambda a: {"q": a.q}, name="plain", description="P.")
    parts = FunctionTool(
        Query, lambda a: iter([{"type": "input_text", "text": a.q}]), name="gen", description="G."
    )
    shouting = Shouting(Query, lambda a: a.q, name="shout", description="S.")
    reg = Registry()
    for sdk_tool in (plain, parts, shouting):
        reg.tool(sdk_tool)
    assert run(reg, "plain", {"q": "x"}).output == '{"q":"x"}'  # no SDK conversion: ours
    assert run(reg, "gen", {"q": "x"}).to_json_dict()["output"] == [
        {"type": "input_text", "text": "x"}
    ]
    assert run(reg, "shout", {"q": "x"}).output == "X"  # its own __call__ ran


def test_an_async_pydantic_function_tool():
    async def find(query: Query) -> list[dict]:
        await asyncio.sleep(0)
        return [
            {"type": "input_text", "text": query.q},
            {"type": "input_image", "image_url": "https://x/y.png"},
        ]

    reg = Registry()
    reg.tool(pydantic_function_tool(Query, handler=find, name="find"))
    assert reg.get("find").is_async
    output = run(reg, "find", {"q": "hi"}).to_json_dict()["output"]
    assert output == [
        {"type": "input_text", "text": "hi"},
        {"type": "input_image", "image_url": "https://x/y.png"},
    ]


def test_handlers_do_not_import_the_sdk():
    code = (
        "import sys; from handlers import Registry, tool_definitions; "
        "r = Registry(); r.load(['handlers.examples']); tool_definitions('chat', r); "
        "assert 'openai' not in sys.modules, 'openai imported'"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
