"""Tool definitions in the form of each API, checked against the SDK's own parameter types."""

import pytest
from openai import pydantic_function_tool
from openai.types.beta.function_tool_param import FunctionToolParam as AssistantsTool
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses.function_tool_param import FunctionToolParam as ResponsesTool
from openai.types.shared_params.function_definition import FunctionDefinition

import handlers.examples
from handlers import Api, Registry, Tool, tool_definitions
from handlers.schema import strict_parameters_schema


@pytest.fixture
def examples() -> Registry:
    reg = Registry()
    for value in vars(handlers.examples).values():
        if isinstance(value, Tool):
            reg.add(value)
    return reg


def keys_fit(definition: dict, typed_dict: type) -> bool:
    """The keys a TypedDict of the SDK requires are there, and no others."""
    return typed_dict.__required_keys__ <= set(definition) <= set(typed_dict.__annotations__)


def test_the_agents_form_is_agent_tools_unchanged(examples):
    assert tool_definitions("agents", examples) == examples.agent_tools()
    assert tool_definitions(registry=examples) == examples.agent_tools()
    assert tool_definitions(Api.AGENTS, examples)[-1] == {"type": "tool_search"}


def test_the_responses_form_is_flat_and_strict(examples):
    definitions = tool_definitions("responses", examples)
    assert definitions[-1] == {"type": "tool_search"}
    for definition, name in zip(definitions, examples.names(), strict=False):
        tool = examples.get(name)
        assert keys_fit(definition, ResponsesTool)
        assert list(definition)[:5] == ["type", "name", "description", "parameters", "strict"]
        assert definition["strict"] is True
        assert definition["parameters"] == strict_parameters_schema(tool.args.model)
        assert definition.get("defer_loading", False) is tool.defer_loading
        assert "defer_loading" not in definition or definition["defer_loading"] is True
    deferred = [d["name"] for d in definitions if d.get("defer_loading")]
    assert deferred == ["search_help_center"]


@pytest.mark.parametrize(
    ("api", "outer"), [("chat", ChatCompletionFunctionToolParam), ("assistants", AssistantsTool)]
)
def test_chat_and_assistants_nest_the_function(examples, api, outer):
    definitions = tool_definitions(api, examples)
    assert [d["function"]["name"] for d in definitions] == examples.names()  # no tool search
    for definition in definitions:
        assert keys_fit(definition, outer) and definition["type"] == "function"
        function = definition["function"]
        assert keys_fit(function, FunctionDefinition)
        assert list(function) == ["name", "description", "parameters", "strict"]
        tool = examples.get(function["name"])
        assert function["parameters"] == strict_parameters_schema(tool.args.model)
        assert function["strict"] is True and function["description"] == tool.description


def test_the_chat_form_has_the_shape_of_the_sdks_pydantic_function_tool(examples):
    tool = examples.get("issue_refund")
    ours = tool_definitions("chat", examples)[examples.names().index("issue_refund")]
    sdk = pydantic_function_tool(tool.args.model, name=tool.name, description=tool.description)
    assert set(ours) == set(sdk) and set(ours["function"]) == set(sdk["function"])
    assert ours["function"]["strict"] == sdk["function"]["strict"]


def test_strict_forms_make_defaults_nullable(examples):
    weather = next(d for d in tool_definitions("responses", examples) if d["name"] == "get_weather")
    params = weather["parameters"]
    assert params["required"] == ["city", "unit"]
    assert params["properties"]["unit"] == {
        "anyOf": [{"type": "string", "enum": ["celsius", "fahrenheit"]}, {"type": "null"}]
    }


def test_an_unknown_api_is_refused(examples):
    with pytest.raises(ValueError, match="unknown API 'completions': expected one of agents"):
        tool_definitions("completions", examples)
