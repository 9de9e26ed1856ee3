import json
import os
import socket
import subprocess
import sys
import tomllib

import pytest
import setuptools

import handlers
from tests.services import ROOT

pytestmark = pytest.mark.slow  # over 5 s: make test-fast leaves it out


def toolfan(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_tools_prints_agent_tools_for_the_examples():
    out = toolfan("tools", TOOLFAN_HANDLERS="handlers.examples")
    assert out.returncode == 0, out.stderr
    tools = json.loads(out.stdout)
    names = [t.get("name") for t in tools]
    assert names == [
        "create_calendar_event",
        "get_customer",
        "get_weather",
        "issue_refund",
        "search_help_center",
        None,
    ]
    assert tools[-1] == {"type": "tool_search"}
    for t in tools[:-1]:
        assert set(t) == {"type", "name", "description", "parameters", "defer_loading"}
        assert t["parameters"]["additionalProperties"] is False and t["description"]


def test_bad_handler_module_is_a_clear_error():
    out = toolfan("tools", TOOLFAN_HANDLERS="no.such.module")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "toolfan: error: RegistryError: cannot import tool module 'no.such.module'" in out.stderr


def test_public_api_is_sorted_and_complete():
    assert handlers.__all__ == sorted(handlers.__all__)
    for name in handlers.__all__:
        assert hasattr(handlers, name)


def test_bench_options_map_to_the_config_and_default_to_it():
    from bench.__main__ import bench_config, build_parser
    from bench.config import BenchConfig

    parser = build_parser()
    assert bench_config(parser.parse_args([])) == BenchConfig()
    args = ["--io-workers", "3", "--interval", "0.2", "--seed", "7", "--ledger-db", "9"]
    config = bench_config(parser.parse_args([*args, "--reps", "5"]))
    assert (config.io_workers, config.poll_interval, config.seed, config.reps) == (3, 0.2, 7, 5)
    assert config.ledger_db == 9 and config.broker_db == BenchConfig().broker_db


def test_the_bench_is_no_toolfan_command_and_not_in_the_wheel():
    from dispatcher.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench"])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    found = setuptools.find_packages(str(ROOT), include=include)
    assert "bench" not in found and "dispatcher" in found and "tasks" in found


def test_tools_api_agents_is_the_default_form():
    default = toolfan("tools", "--compact", TOOLFAN_HANDLERS="handlers.examples")
    agents = toolfan("tools", "--api", "agents", "--compact", TOOLFAN_HANDLERS="handlers.examples")
    assert default.returncode == agents.returncode == 0, default.stderr + agents.stderr
    assert default.stdout == agents.stdout and len(default.stdout.splitlines()) == 1


def test_tools_prints_the_strict_forms_of_each_api():
    import handlers.examples
    from handlers.definitions import tool_definitions
    from handlers.registry import Registry
    from handlers.tool import Tool

    examples = Registry()
    for value in vars(handlers.examples).values():
        if isinstance(value, Tool):
            examples.add(value)
    for api in ("responses", "chat", "assistants"):
        out = toolfan("tools", "--api", api, TOOLFAN_HANDLERS="handlers.examples")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == tool_definitions(api, examples)
    chat = json.loads(
        toolfan("tools", "--api", "chat", TOOLFAN_HANDLERS="handlers.examples").stdout
    )
    assert {t["function"]["strict"] for t in chat} == {True}


def test_tools_lists_sdk_tools_with_their_own_schema():
    import tests.sdk_tools as sdk

    out = toolfan("tools", TOOLFAN_HANDLERS="tests.sdk_tools")
    assert out.returncode == 0, out.stderr
    tools = {t["name"]: t for t in json.loads(out.stdout)}
    assert sorted(tools) == ["sdk_echo", "sdk_lookup", "sdk_nap", "sdk_weather"]
    assert tools["sdk_weather"] == {**sdk.sdk_weather.definition, "defer_loading": False}


def test_tools_refuses_an_unknown_api():
    out = toolfan("tools", "--api", "completions", TOOLFAN_HANDLERS="handlers.examples")
    assert out.returncode == 2 and "invalid choice: 'completions'" in out.stderr


def test_runs_watch_refuses_a_run_no_request_could_read(redis_client):
    done = toolfan("runs", "watch", "thread_1", "..")
    assert done.returncode == 2
    assert "cannot name a run" in done.stderr and "Traceback" not in done.stderr
    assert redis_client.hlen("toolfan:v2:assistants:watches") == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon"])
def test_a_poll_interval_that_is_no_positive_number_is_refused_before_any_work(value):
    # nan and negatives made the loop list the API without pause; inf crashed it after
    # one pass. No API key is set: the refusal comes first.
    out = toolfan("poll", "--interval", value, OPENAI_API_KEY="", TOOLFAN_REDIS_URL="redis://x:1")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "argument --interval:" in out.stderr and "seconds" in out.stderr
    assert "cannot start" not in out.stderr


def test_command_timeouts_are_positive_numbers_of_seconds():
    for command in (["demo"], ["chat", "hello"]):
        out = toolfan(*command, "--timeout", "nan")
        assert out.returncode == 2 and "argument --timeout:" in out.stderr, out.stderr


@pytest.mark.parametrize("command", [["poll", "--interval", "1"], ["worker"]])
@pytest.mark.parametrize("port", ["abc", "0", "65536", "-5", "1e3", "٣٣"])
def test_a_metrics_port_that_is_no_port_refuses_the_start_by_name(command, port):
    # It was int(value) where the metrics server starts: a traceback in the poller, and
    # in a worker's start-up signal a logged error and a worker with no metrics.
    out = toolfan(*command, TOOLFAN_METRICS_PORT=port)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "TOOLFAN_METRICS_PORT: not a port number (1 to 65535)" in out.stderr


def test_a_metrics_port_already_taken_refuses_the_poller_in_one_line(emulator):
    # It was an OSError's traceback from the metrics server's start, and no word of which
    # setting to change.
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = toolfan("poll", "--interval", "1", TOOLFAN_METRICS_PORT=str(port))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"TOOLFAN_METRICS_PORT={port}: no metrics endpoint: Address already in use" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_webhook_secret_cut_short_refuses_the_intake_start_without_showing_it():
    good = "whsec_" + "bm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm4="
    cut = good[:-3] + "x"
    out = toolfan("webhook", "--port", "0", OPENAI_WEBHOOK_SECRET=f"{good},{cut}")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "OPENAI_WEBHOOK_SECRET: secret 2 of 2 starts with whsec_" in out.stderr
    assert good[8:] not in out.stdout + out.stderr and cut[8:] not in out.stdout + out.stderr


@pytest.mark.parametrize("option", ["--sessions", "--runs"])
@pytest.mark.parametrize("value", ["-5", "1.5", "100001", "x"])
def test_demo_counts_are_whole_numbers_from_zero(option, value):
    # A negative count was taken: "seeded -5 sessions", or a demo that went well and
    # reported a failure because no count of completed runs equals -3.
    out = toolfan("demo", option, value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"argument {option}: not a count (0 to 100000): '{value}'" in out.stderr
    assert "seeded" not in out.stdout


@pytest.mark.parametrize("command", ["webhook", "emulator"])
@pytest.mark.parametrize("value", ["-1", "65536", "99999", "http"])
def test_a_port_out_of_range_is_a_usage_error_not_a_traceback(command, value):
    out = toolfan(command, "--port", value)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"argument --port: not a port number (0 to 65535): '{value}'" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("command", [["poll", "--once"], ["worker"], ["check"]])
def test_a_malformed_redis_url_refuses_the_start_without_a_traceback_or_its_password(command):
    out = toolfan(*command, TOOLFAN_REDIS_URL="redis://:s3cret/pw@h/0", OPENAI_API_KEY="x")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "TOOLFAN_REDIS_URL: not a Redis URL: a port is not a number" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "s3cret" not in out.stdout + out.stderr
