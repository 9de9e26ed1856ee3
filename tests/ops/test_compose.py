"""docker-compose.yml: valid for Compose itself, and wired the way the README says.

No Docker engine runs here, so ``docker-compose config -q`` (which resolves anchors,
interpolation and profiles without a daemon) is the closest thing to ``docker compose up``;
the structural tests then check what Compose cannot know: the commands are real toolfan
commands, every queue has a worker, Redis keeps the ledger safe, secrets come from the
environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from typing import Any

import pytest
import yaml

from tests.ops.commands import Command, check_worker_groups, parse, path, read

SHARED_ENV = {
    "TOOLFAN_REDIS_URL": "redis://redis:6379/0",
    "OPENAI_BASE_URL": "http://emulator:8765/v1",
    "OPENAI_API_KEY": "${OPENAI_API_KEY:-demo}",
    "TOOLFAN_HANDLERS": "${TOOLFAN_HANDLERS:-handlers.examples}",
}
TOOLFAN_SERVICES = {
    "worker-default",
    "worker-slow",
    "worker-control",
    "poller",
    "beat",
    "flower",
    "webhook",
}


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load(read("docker-compose.yml"))
    return compose["services"]


def compose_command() -> list[str]:
    """``docker-compose`` (Debian's package), else the ``docker compose`` plugin."""
    if binary := shutil.which("docker-compose"):
        return [binary]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    reason = "docker-compose is not installed (apt-get install docker-compose)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must validate the compose file")
    pytest.skip(reason)


def test_compose_config_is_valid():
    # A bare environment: the file must be valid with no variable set (the demo defaults).
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    out = subprocess.run(
        [*compose_command(), "-f", str(path("docker-compose.yml")), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "WARN" not in out.stderr.upper(), out.stderr


def test_redis_keeps_the_ledger(services):
    redis = services["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and not volume[0].startswith((".", "/")), "a named volume"


def test_toolfan_services_share_env_and_run_real_commands(services):
    for name in TOOLFAN_SERVICES:
        service = services[name]
        assert {k: service["environment"].get(k) for k in SHARED_ENV} == SHARED_ENV, name
        assert (service["build"], service["pull_policy"]) == (".", "build"), name
        parse(service["command"])


def test_worker_groups_consume_every_queue(services):
    groups = {
        name: parse(s["command"])
        for name, s in services.items()
        if s.get("command", [None, None])[:2] == ["toolfan", "worker"]
    }
    assert set(groups) == {"worker-default", "worker-slow", "worker-control"}
    check_worker_groups(groups)
    assert groups["worker-default"].options["pool"].__module__.endswith("prefork")
    assert groups["worker-slow"].options["pool"].__module__.endswith("thread")


def test_workers_serve_metrics_from_a_fresh_multiproc_dir(services):
    for name in ("worker-default", "worker-slow", "worker-control"):
        env = services[name]["environment"]
        assert env["TOOLFAN_METRICS_PORT"] == "9808"
        assert env["PROMETHEUS_MULTIPROC_DIR"] in services[name]["tmpfs"]
    assert services["poller"]["environment"]["TOOLFAN_METRICS_PORT"] == "9808"


def test_poller_by_default_beat_as_a_profile(services):
    poller = parse(services["poller"]["command"])
    assert poller.name == "poll" and poller.options["interval"] == 5
    assert "profiles" not in services["poller"]
    beat = parse(services["beat"]["command"])
    assert beat.name == "beat" and beat.options["schedule"] == "/tmp/beat-schedule"
    assert services["beat"]["profiles"] == ["beat"]


def test_emulator_is_where_the_api_url_points(services):
    command = parse(services["emulator"]["command"])
    assert command.name == "emulator" and command.options["host"] == "0.0.0.0"
    assert SHARED_ENV["OPENAI_BASE_URL"] == f"http://emulator:{command.options['port']}/v1"


def test_flower_has_basic_auth_from_the_environment(services):
    flower: Command = parse(services["flower"]["command"])
    assert flower.name == "flower"
    assert flower.options["basic-auth"].startswith("${FLOWER_BASIC_AUTH")
    assert flower.options["address"] == "0.0.0.0"
    published = services["flower"]["ports"][0]
    assert published.startswith("127.0.0.1:"), "published on the loopback only"


def test_prometheus_is_optional_and_uses_the_ops_config(services):
    prometheus = services["prometheus"]
    assert prometheus["profiles"] == ["monitoring"]
    source, target = prometheus["volumes"][0].split(":")[:2]
    config = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    assert config.split("=", 1)[1] == f"{target}/prometheus.yml"
    assert (path(source) / "prometheus.yml").is_file()


def test_image_holds_every_package():
    # The image installs with `pip install .`: every package setuptools looks for must be
    # copied in, or a process in the container fails on its first import.
    find = tomllib.loads(read("pyproject.toml"))["tool"]["setuptools"]["packages"]["find"]
    dockerfile = read("Dockerfile")
    for package in (pattern.rstrip("*") for pattern in find["include"]):
        assert f"COPY {package} {package}" in dockerfile


def test_the_webhook_intake_is_served_and_checked_on_healthz(services):
    webhook = services["webhook"]
    command = parse(webhook["command"])
    assert command.name == "webhook" and command.options["host"] == "0.0.0.0"
    assert "127.0.0.1:8088:8088" in webhook["ports"]
    assert "/healthz" in " ".join(webhook["healthcheck"]["test"])
    assert "OPENAI_WEBHOOK_SECRET" in webhook["environment"]
