"""ops/: Kubernetes manifests, Prometheus config and alerts, systemd units, the crontab.

Each file is parsed and its commands checked by the parsers that will really read them
(see ``tests/ops/commands.py``); the crontab's command is run for real against the test
Redis and emulator. ``promtool`` and ``systemd-analyze`` add their own checks where
installed; they are linters on top of the structural tests, so their absence only skips.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator import EmulatorState
from tests.ops.commands import Command, check_worker_groups, parse, path, read

#: The metrics the workers and poller export (tasks/metrics.py), as Prometheus names them.
METRICS = {
    "toolfan_calls_total",
    "toolfan_call_duration_seconds",
    "toolfan_time_to_submit_seconds",
    "toolfan_submit_attempts_total",
    "toolfan_sessions_pending",
    "toolfan_stale_claims",
    "toolfan_poll_duration_seconds",
    "toolfan_abandoned_calls_total",
    "toolfan_ledger_errors_total",
    "toolfan_config_errors_total",
    "toolfan_refused_results_total",
    "toolfan_stuck_calls",
    "toolfan_poll_errors_total",
    "toolfan_orphans_total",
    "toolfan_workers_alive",
    "toolfan_approvals_total",
    "toolfan_approvals_pending",
    "toolfan_approval_nearest_deadline_seconds",
    "toolfan_webhook_deliveries_total",
}
K8S = path("ops/k8s")


def manifests() -> list[dict[str, Any]]:
    docs = []
    for file in sorted(K8S.glob("*.yaml")):
        docs += [doc for doc in yaml.safe_load_all(file.read_text()) if doc]
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in manifests() if d["kind"] == kind}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def container_command(obj: dict[str, Any]) -> Command:
    (container,) = pod_spec(obj)["containers"]
    return parse([str(a) for a in container["command"]])


# Kubernetes


def test_k8s_manifests_have_the_expected_kinds():
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in manifests())
    assert kinds == [
        ("ConfigMap", "toolfan-config"),
        ("CronJob", "toolfan-poll"),
        ("Deployment", "toolfan-flower"),
        ("Deployment", "toolfan-poller"),
        ("Deployment", "toolfan-webhook"),
        ("Deployment", "toolfan-worker-control"),
        ("Deployment", "toolfan-worker-default"),
        ("Deployment", "toolfan-worker-slow"),
        ("Secret", "toolfan-flower"),
        ("Secret", "toolfan-secrets"),
        ("Secret", "toolfan-webhook"),
        ("Service", "toolfan-flower"),
        ("Service", "toolfan-webhook"),
    ]
    for doc in manifests():
        assert doc["apiVersion"] in {"v1", "apps/v1", "batch/v1"}, doc["metadata"]["name"]


def test_k8s_deployments_select_their_own_pods_and_read_defined_config():
    config, secrets = by_kind("ConfigMap"), by_kind("Secret")
    for name, deployment in by_kind("Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"] == labels, name
        (container,) = pod_spec(deployment)["containers"]
        for source in container["envFrom"]:
            ref = source.get("configMapRef") or source["secretRef"]
            assert ref["name"] in (config if "configMapRef" in source else secrets), name


def test_k8s_worker_groups_consume_every_queue_with_fresh_metrics_dirs():
    workers = {n: d for n, d in by_kind("Deployment").items() if "worker" in n}
    check_worker_groups({name: container_command(d) for name, d in workers.items()})
    for name, deployment in workers.items():
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volume = mounts[env["PROMETHEUS_MULTIPROC_DIR"]]
        assert "emptyDir" in next(v for v in spec["volumes"] if v["name"] == volume), name
        assert {"containerPort": int(env["TOOLFAN_METRICS_PORT"]), "name": "metrics"} in (
            container["ports"]
        )


def test_k8s_polling_is_a_forbid_cronjob_or_one_interval_poller():
    cronjob = by_kind("CronJob")["toolfan-poll"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["schedule"] == "* * * * *"
    once = container_command(cronjob)
    assert once.name == "poll" and once.options["once"]
    poller = by_kind("Deployment")["toolfan-poller"]
    assert poller["spec"]["replicas"] == 1
    assert container_command(poller).options["interval"] == 5
    assert "OR" in read("ops/k8s/poller-cronjob.yaml") and "OR" in read(
        "ops/k8s/poller-deployment.yaml"
    ), "each says to deploy one or the other"


def test_k8s_flower_has_basic_auth_and_a_service():
    flower = by_kind("Deployment")["toolfan-flower"]
    assert container_command(flower).name == "flower"
    (container,) = pod_spec(flower)["containers"]
    secret_names = [s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s]
    assert any("FLOWER_BASIC_AUTH" in by_kind("Secret")[n]["stringData"] for n in secret_names)
    service = by_kind("Service")["toolfan-flower"]
    assert service["spec"]["selector"].items() <= (
        flower["spec"]["template"]["metadata"]["labels"].items()
    )
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}


# Prometheus


def prometheus_config() -> dict[str, Any]:
    return yaml.safe_load(read("ops/prometheus/prometheus.yml"))


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(read("ops/prometheus/alerts.yml"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_prometheus_scrapes_the_compose_services_on_their_metrics_port():
    config = prometheus_config()
    assert config["rule_files"] == ["alerts.yml"]
    services = yaml.safe_load(read("docker-compose.yml"))["services"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"toolfan-workers", "toolfan-poller", "toolfan-webhook"}
    for job_name, job in jobs.items():
        for sd in job["dns_sd_configs"]:
            for name in sd["names"]:
                if job_name == "toolfan-webhook":  # the intake's own port serves /metrics
                    assert f"{sd['port']}:{sd['port']}" in services[name]["ports"][0], name
                    continue
                port = services[name]["environment"]["TOOLFAN_METRICS_PORT"]
                assert sd["port"] == int(port), name


def test_alerts_cover_the_failure_modes():
    names = {rule["alert"] for rule in alert_rules()}
    needed_alerts = ("SessionsStuck", "AbandonedCalls", "WorkerDown", "QueueBacklog", "StaleClaims")
    more = ("ConfigurationErrors", "StuckCalls", "OrphansPilingUp", "WebhookBusy")
    for needed in (*needed_alerts, *more):
        assert f"Toolfan{needed}" in names
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_alerts_use_only_metrics_that_exist():
    jobs = {job["job_name"] for job in prometheus_config()["scrape_configs"]}
    for rule in alert_rules():
        expr = rule["expr"]
        for metric in re.findall(r"\btoolfan_[a-z_]+", expr):
            assert re.sub(r"_(bucket|sum|count)$", "", metric) in METRICS, (rule["alert"], metric)
        for job in re.findall(r'job="([^"]+)"', expr):
            assert job in jobs, (rule["alert"], job)


def test_metric_names_match_the_metrics_module():
    # prometheus_client adds `_total` to counters; the module names them without it.
    source = read("tasks/metrics.py") + read("dispatcher/webhook/metrics.py")
    for metric in METRICS:
        assert f'"{metric.removesuffix("_total")}"' in source, metric


def test_promtool_accepts_config_and_rules():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus); structure checked above")
    for args in (["check", "config"], ["check", "rules"]):
        target = "prometheus.yml" if args[1] == "config" else "alerts.yml"
        out = subprocess.run(
            [promtool, *args, target],
            cwd=path("ops/prometheus"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr


# systemd


def unit(name: str) -> dict[str, list[str]]:
    """``Key: [values]`` of a unit file (a key may repeat, as EnvironmentFile does)."""
    keys: dict[str, list[str]] = {}
    for line in read(f"ops/systemd/{name}").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            keys.setdefault(key, []).append(value)
    return keys


def env_file(name: str) -> dict[str, str]:
    lines = read(f"ops/systemd/{name}").splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def exec_start(argv: str, env: dict[str, str]) -> Command:
    words = shlex.split(argv)
    assert words[0] == "/opt/toolfan/bin/toolfan"
    expanded = [re.sub(r"\$\{(\w+)\}", lambda m: env[m[1]], w) for w in words[1:]]
    return parse(["toolfan", *(w.replace("%i", "group").replace("%H", "host") for w in expanded)])


def test_systemd_worker_template_runs_each_group_from_its_env_file():
    worker = unit("toolfan-worker@.service")
    assert worker["EnvironmentFile"] == [
        "/etc/toolfan/toolfan.env",
        "/etc/toolfan/worker-%i.env",
    ]
    assert worker["RuntimeDirectory"] == ["toolfan-worker-%i"]
    assert worker["Environment"] == ["PROMETHEUS_MULTIPROC_DIR=/run/toolfan-worker-%i"]
    assert worker["KillMode"] == ["mixed"], "warm shutdown: SIGTERM to the main process only"
    groups = {}
    for group in ("default", "slow", "control"):
        env = env_file(f"worker-{group}.env")
        groups[f"worker-{group}"] = exec_start(worker["ExecStart"][0], env)
        assert env["TOOLFAN_METRICS_PORT"]
    check_worker_groups(groups)


def test_k8s_webhook_is_ready_on_healthz_behind_a_service_with_its_secret():
    webhook = by_kind("Deployment")["toolfan-webhook"]
    command = container_command(webhook)
    assert command.name == "webhook" and command.options["port"] == 8088
    (container,) = pod_spec(webhook)["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    secret_names = [s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s]
    assert any("OPENAI_WEBHOOK_SECRET" in by_kind("Secret")[n]["stringData"] for n in secret_names)
    service = by_kind("Service")["toolfan-webhook"]
    assert service["spec"]["selector"].items() <= (
        webhook["spec"]["template"]["metadata"]["labels"].items()
    )
    assert "TLS" in read("ops/k8s/webhook.yaml")


def test_systemd_webhook_unit():
    webhook = unit("toolfan-webhook.service")
    command = exec_start(webhook["ExecStart"][0], {})
    assert command.name == "webhook" and command.options["host"] == "127.0.0.1"
    assert "/etc/toolfan/webhook.env" in webhook["EnvironmentFile"]
    assert env_file("webhook.env.example")["OPENAI_WEBHOOK_SECRET"].startswith("whsec_")


def test_systemd_poller_and_flower():
    poller = unit("toolfan-poller.service")
    assert exec_start(poller["ExecStart"][0], {}).options["interval"] == 5
    flower = unit("toolfan-flower.service")
    assert exec_start(flower["ExecStart"][0], {}).name == "flower"
    assert "/etc/toolfan/flower.env" in flower["EnvironmentFile"]
    assert env_file("flower.env.example")["FLOWER_BASIC_AUTH"]
    assert env_file("toolfan.env.example")["OPENAI_API_KEY"]


def test_systemd_analyze_verifies_the_units(tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed; units checked structurally above")
    # verify insists that ExecStart exists: point it at this checkout's toolfan.
    toolfan = str(Path(sys.executable).parent / "toolfan")
    names = {"toolfan-worker@.service": "toolfan-worker@default.service"}
    for unit_file in path("ops/systemd").glob("*.service"):
        text = unit_file.read_text().replace("/opt/toolfan/bin/toolfan", toolfan)
        (tmp_path / names.get(unit_file.name, unit_file.name)).write_text(text)
    out = subprocess.run(
        [analyze, "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr


# cron


def cron_entry() -> tuple[list[str], str, str]:
    """(schedule fields, user, command) of the crontab's one job line."""
    jobs = [
        line
        for line in read("ops/cron/toolfan").splitlines()
        if line.strip() and not line.startswith("#") and "=" not in line.split()[0]
    ]
    (job,) = jobs
    fields = job.split(None, 6)
    return fields[:5], fields[5], fields[6]


def test_crontab_line_is_cron_d_syntax():
    schedule, user, command = cron_entry()
    assert schedule == ["*"] * 5
    assert user == "toolfan"
    assert "%" not in command, "cron turns % into a newline"
    assert "flock -n " in command and command.endswith("toolfan poll --once")
    assert read("ops/cron/toolfan").endswith("\n"), "cron ignores a last line without newline"


def run_cron_command(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The crontab's command, as cron would run it, with this test's env file and lock."""
    _, _, command = cron_entry()
    keys = ("TOOLFAN_REDIS_URL", "TOOLFAN_BROKER_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")
    lines = [f"{k}={os.environ[k]}\n" for k in keys]
    # Only the installed package is importable from cron's working directory.
    (tmp_path / "toolfan.env").write_text("".join(lines) + "TOOLFAN_HANDLERS=handlers.examples\n")
    command = command.replace("/etc/toolfan/toolfan.env", str(tmp_path / "toolfan.env"))
    command = command.replace("/run/toolfan/poll.lock", str(tmp_path / "poll.lock"))
    # cron's environment: little more than the PATH the crontab sets.
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, env=env, timeout=60
    )


def test_cron_command_polls_once_and_skips_while_locked(api: EmulatorState, tmp_path: Path):
    out = run_cron_command(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("poll: 0 sessions seen"), out.stdout
    with open(tmp_path / "poll.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        skipped = run_cron_command(tmp_path)
    assert (skipped.returncode, skipped.stdout, skipped.stderr) == (1, "", ""), "flock -n skips"
