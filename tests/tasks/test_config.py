import os

import pytest

from handlers import Registry, RegistryError
from tasks import app
from tasks.config import celery_config, check_limits, usable_cpus, worker_concurrency
from tasks.queues import Router
from tasks.settings import Settings, SettingsError
from tasks.worker import worker_argv


def test_app_config_makes_at_least_once_safe():
    conf = app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    assert not conf.worker_send_task_events  # Flower turns them on (tests/ops/test_flower.py)
    assert not conf.task_send_sent_event  # one PUBLISH per call saved; backlogs are metrics
    vt = conf.broker_transport_options["visibility_timeout"]
    assert conf.result_backend_transport_options["visibility_timeout"] == vt
    assert conf.task_time_limit <= vt / 2
    assert conf.result_expires > 0


def test_routes_follow_the_registry():
    reg = Registry()

    @reg.tool(queue="slow")
    def crunch() -> None:
        """Slow."""

    @reg.tool
    def quick() -> None:
        """Quick."""

    route = Router(reg)

    def call(name: str) -> dict:
        return {"call": {"source": "agents", "batch_id": "s", "call_id": "c", "name": name}}

    assert route("toolfan.execute", (), call("crunch"), {}) == {"queue": "slow"}
    assert route("toolfan.execute", (), call("quick"), {}) == {"queue": "fn.quick"}
    assert route("toolfan.execute", (), call("ghost"), {}) == {"queue": "toolfan.submit"}
    # Routing reads the envelope by name; positions mean nothing to it.
    assert route("toolfan.execute", ("s", "t", "c", "crunch", {}), {}, {}) == {
        "queue": "toolfan.submit"
    }
    assert route("toolfan.submit", (), {}, {}) == {"queue": "toolfan.submit"}
    assert route("toolfan.poll", (), {}, {}) == {"queue": "toolfan.poll"}
    assert route("toolfan.model", ("conv_1",), {}, {}) == {"queue": "toolfan.model"}
    names = [q.name for q in celery_config(Settings(), reg)["task_queues"]]
    assert names == ["fn.quick", "slow", "toolfan.submit", "toolfan.poll", "toolfan.model"]


def test_tool_timeout_beyond_visibility_timeout_is_refused():
    reg = Registry()

    @reg.tool(timeout=2000)
    def long() -> None:
        """Long."""

    with pytest.raises(RegistryError, match="TOOLFAN_VISIBILITY_TIMEOUT"):
        check_limits(Settings(), reg)
    check_limits(Settings(visibility_timeout=10_000), reg)


def test_settings_from_env():
    s = Settings.from_env(
        {"TOOLFAN_REDIS_URL": "redis://r:1/2", "TOOLFAN_HANDLERS": "a.b, c ,", "OTHER": "x"}
    )
    assert s.redis_url == "redis://r:1/2" and s.broker == "redis://r:1/2"
    assert s.handlers == ("a.b", "c")
    assert Settings.from_env({"TOOLFAN_BROKER_URL": "amqp://h"}).broker == "amqp://h"
    with pytest.raises(SettingsError, match="TOOLFAN_LEDGER_TTL"):
        Settings.from_env({"TOOLFAN_LEDGER_TTL": "soon"})


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400", "Infinity"])
@pytest.mark.parametrize(
    "name", ["TOOLFAN_QUEUE_BUDGET", "TOOLFAN_POLL_INTERVAL", "TOOLFAN_RUNS_RECHECK_MAX"]
)
def test_a_number_setting_refuses_infinity_and_nan_by_name(name, value):
    """An infinite queue budget made every dispatch's lease ``int(inf)``: an error each pass."""
    with pytest.raises(SettingsError, match=f"{name}: Input should be a finite number"):
        Settings.from_env({name: value})
    assert Settings.from_env({name: "2.5"}).model_dump()[name.removeprefix("TOOLFAN_").lower()]


def test_worker_argv_defaults_and_subset():
    argv = worker_argv(["-c", "4"])
    queues = argv[argv.index("-Q") + 1].split(",")
    assert "fn.add" in queues and queues[-3:] == [
        "toolfan.submit",
        "toolfan.poll",
        "toolfan.model",
    ]
    assert worker_argv(["-Q", "fn.add"]) == ["worker", "-Q", "fn.add", "--loglevel", "INFO"]


def test_beat_polls_every_interval_and_expires_stale_polls():
    conf = celery_config(Settings(poll_interval=30), Registry())
    entry = conf["beat_schedule"]["toolfan-poll"]
    assert entry["task"] == "toolfan.poll"
    assert entry["schedule"] == 30
    assert 0 < entry["options"]["expires"] <= 30


def test_task_events_are_off_until_flower_or_the_setting_turns_them_on():
    assert celery_config(Settings.from_env({}), Registry())["worker_send_task_events"] is False
    on = Settings.from_env({"TOOLFAN_TASK_EVENTS": "1"})
    assert celery_config(on, Registry())["worker_send_task_events"] is True


@pytest.mark.parametrize(
    ("cpu_max", "cap"),
    [
        ("max 100000\n", None),  # no quota: the affinity counts
        ("100000 100000\n", 1),
        ("150000 100000\n", 2),  # a part of a CPU counts as one
        ("1000 100000\n", 1),  # never fewer than one
        ("garbage\n", None),
        ("0 0\n", None),
    ],
)
def test_usable_cpus_are_cut_to_the_containers_quota(tmp_path, cpu_max, cap):
    """A worker in a one-CPU container on a large node must not start a process per core."""
    path, no_v1 = tmp_path / "cpu.max", tmp_path / "no-v1"
    path.write_text(cpu_max)
    affinity = len(os.sched_getaffinity(0))
    assert usable_cpus(path, no_v1) == (affinity if cap is None else min(cap, affinity))
    assert usable_cpus(tmp_path / "absent", no_v1) == affinity


@pytest.mark.parametrize(
    ("quota", "period", "cap"),
    [
        ("-1", "100000", None),  # no quota: the affinity counts
        ("100000", "100000", 1),
        ("150000", "100000", 2),
        ("1000", "100000", 1),
        ("garbage", "100000", None),
        ("50000", "0", None),
    ],
)
def test_usable_cpus_read_a_cgroup_v1_quota_when_there_is_no_v2(tmp_path, quota, period, cap):
    """Older container hosts state the quota in cgroup v1's two files."""
    cfs = tmp_path / "cpu"
    cfs.mkdir()
    (cfs / "cpu.cfs_quota_us").write_text(quota + "\n")
    (cfs / "cpu.cfs_period_us").write_text(period + "\n")
    affinity = len(os.sched_getaffinity(0))
    assert usable_cpus(tmp_path / "absent", cfs) == (
        affinity if cap is None else min(cap, affinity)
    )
    cpu_max = tmp_path / "cpu.max"  # where both are there, cgroup v2 is the one read
    cpu_max.write_text("max 100000\n")
    assert usable_cpus(cpu_max, cfs) == affinity


def test_worker_concurrency_defaults_to_twice_the_usable_cpus():
    assert worker_concurrency(Settings()) == 2 * usable_cpus()
    assert worker_concurrency(Settings(worker_concurrency=5)) == 5
    assert app.conf.worker_concurrency == worker_concurrency(Settings())
    with pytest.raises(SettingsError):
        Settings.from_env({"TOOLFAN_WORKER_CONCURRENCY": "-1"})


@pytest.mark.parametrize(
    ("name", "url", "problem"),
    [
        ("TOOLFAN_REDIS_URL", "localhost:6379", "it must start with redis://, rediss://"),
        ("TOOLFAN_REDIS_URL", "amqp://h//", "it must start with redis://, rediss://"),
        ("TOOLFAN_REDIS_URL", "redis://h:99999/0", "a port is not a number"),
        ("TOOLFAN_REDIS_URL", "redis://:s3cret/pw@h/0", "a port is not a number"),
        ("TOOLFAN_BROKER_URL", "localhost", "it names no transport"),
        ("TOOLFAN_BROKER_URL", "amqp://:s3cret/pw@h//", "a port is not a number"),
        ("TOOLFAN_BROKER_URL", "redis://h:6379/0;redis://h:abc/0", "a port is not a number"),
    ],
)
def test_a_malformed_url_is_refused_by_name_without_quoting_it(name, url, problem):
    # redis-py and kombu raised from deep inside (kombu even from its URL sanitizer), and
    # redis-py's message quoted the unreadable part: here, a password with a slash.
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({name: url})
    text = str(raised.value)
    assert text.startswith(f"{name}: not a ") and problem in text
    assert "s3cret" not in text and raised.value.__context__ is None  # nor chained


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("TOOLFAN_REDIS_URL", "redis://:pw@localhost:6379/3"),
        ("TOOLFAN_REDIS_URL", "rediss://h:6380/0"),
        ("TOOLFAN_REDIS_URL", "redis://[::1]:6379/0"),
        ("TOOLFAN_REDIS_URL", "unix:///run/redis.sock?db=2"),
        ("TOOLFAN_BROKER_URL", "amqp://guest:guest@localhost:5672//"),
        ("TOOLFAN_BROKER_URL", "sentinel://h1:26379;sentinel://h2:26379"),
        ("TOOLFAN_BROKER_URL", "sqs://"),
        ("TOOLFAN_BROKER_URL", ""),  # empty: the Redis URL is the broker
    ],
)
def test_well_formed_urls_are_taken_as_given(name, url):
    settings = Settings.from_env({name: url})
    assert settings.broker == (url or settings.redis_url) or settings.redis_url == url


@pytest.mark.parametrize(
    ("name", "value", "limit"),
    [
        ("TOOLFAN_LEDGER_TTL", "100000000000000000", 315_360_000),  # Redis: invalid expire
        ("TOOLFAN_POLL_INTERVAL", "1e10", 31_536_000),  # a thread's wait: OverflowError
        ("TOOLFAN_DEAD_AFTER", "1e10", 31_536_000),
        ("TOOLFAN_RUNS_RECHECK_MAX", "1e10", 31_536_000),
        ("TOOLFAN_SUBMIT_RETRIES", "10000000000", 1000),
    ],
)
def test_a_setting_far_past_any_sane_value_is_refused_by_name(name, value, limit):
    # Each was taken, then failed where it was used: every ledger write refused by
    # Redis, or the loop's first wait raising OverflowError.
    with pytest.raises(SettingsError, match=f"^{name}: Input should be less than or equal"):
        Settings.from_env({name: value})
    assert Settings.from_env({name: str(limit)})  # the limit itself is taken


def test_the_intakes_budget_below_one_delivery_is_refused_by_name():
    # Below TOOLFAN_WEBHOOK_MAX_BYTES, a delivery of the largest size taken would never fit.
    small = {"TOOLFAN_WEBHOOK_MAX_BYTES": "2048", "TOOLFAN_WEBHOOK_MAX_PENDING_BYTES": "2047"}
    with pytest.raises(SettingsError, match="TOOLFAN_WEBHOOK_MAX_PENDING_BYTES: must be at least"):
        Settings.from_env(small)
    even = {**small, "TOOLFAN_WEBHOOK_MAX_PENDING_BYTES": "2048"}
    assert Settings.from_env(even).webhook_max_pending_bytes == 2048
    assert Settings.from_env({}).webhook_max_pending_bytes == 64 << 20


@pytest.mark.parametrize(
    ("value", "problem"),
    [(" ", "only whitespace"), ("\n\t ", "only whitespace"), ("to\x00ken", "control characters")],
)
def test_an_intake_token_no_header_can_carry_is_refused_by_name(value, problem):
    # A token of spaces was taken: no Authorization header could send it, but the approval
    # page's sign-in form could, so anyone typing a space signed in.
    with pytest.raises(SettingsError, match=f"^TOOLFAN_INTAKE_TOKEN: .*{problem}") as raised:
        Settings.from_env({"TOOLFAN_INTAKE_TOKEN": value})
    assert "to\x00ken" not in str(raised.value)


def test_an_intake_token_read_from_a_file_loses_its_newline():
    token = Settings.from_env({"TOOLFAN_INTAKE_TOKEN": "  s3cret-token\n"}).intake_token
    assert token is not None and token.get_secret_value() == "s3cret-token"
    assert Settings.from_env({"TOOLFAN_INTAKE_TOKEN": ""}).intake_token is None  # unset
