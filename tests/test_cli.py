import json
import os
import subprocess
import sys

import handlers
from tests.services import ROOT


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
    from dispatcher.bench.config import BenchConfig
    from dispatcher.cli import bench_config, build_parser

    parser = build_parser()
    assert bench_config(parser.parse_args(["bench"])) == BenchConfig()
    args = ["bench", "--io-workers", "3", "--interval", "0.2", "--seed", "7", "--ledger-db", "9"]
    config = bench_config(parser.parse_args(args))
    assert (config.io_workers, config.poll_interval, config.seed) == (3, 0.2, 7)
    assert config.ledger_db == 9 and config.broker_db == BenchConfig().broker_db
