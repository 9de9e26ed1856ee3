"""How ``toolfan worker``'s options split between its prefork pool and its control worker."""

from __future__ import annotations

import pytest

from tasks.control_worker import Split, control_nodename, option_value, plan
from tasks.settings import Settings, SettingsError
from tasks.worker import serves_control_queues

FUNCTIONS = ["fn.add", "fn.slow"]
CONTROL = ["toolfan.submit", "toolfan.poll", "toolfan.model"]


def split(*options: str, threads: int = 16) -> Split | None:
    return plan(list(options), FUNCTIONS, CONTROL, threads)


def test_a_bare_worker_splits_into_a_pool_on_the_functions_and_threads_on_the_control_queues():
    result = split()
    assert result is not None
    assert result.pool == ["-Q", "fn.add,fn.slow"]
    assert result.control == [
        "-Q",
        "toolfan.submit,toolfan.poll,toolfan.model",
        "-P",
        "threads",
        "-c",
        "16",
        "-n",
        "control@%h",
    ]


def test_the_pool_keeps_every_option_and_the_control_worker_only_the_shared_ones():
    options = ["-c", "8", "-n", "w1@%h", "-l", "DEBUG", "-E", "--without-gossip", "-B"]
    options += ["--max-tasks-per-child=100", "--pidfile", "/run/w.pid", "-Pprefork"]
    options += ["--autoscale", "10,2", "-S", "/var/state", "--prefetch-multiplier", "2"]
    result = split(*options, threads=4)
    assert result is not None
    assert result.pool == [*options, "-Q", "fn.add,fn.slow"]
    shared = ["-l", "DEBUG", "-E", "--without-gossip", "--prefetch-multiplier", "2"]
    control = ["-Q", ",".join(CONTROL), "-P", "threads", "-c", "4", "-n", "w1-control@%h"]
    assert result.control == [*shared, *control]


@pytest.mark.parametrize(
    "options",
    [
        ["-Q", "fn.add"],
        ["--queues=fn.add"],
        ["-Qfn.add"],
        ["-X", "fn.slow"],
        ["--exclude-queues", "fn.slow"],
        ["-D"],
        ["-P", "threads"],
        ["--pool=gevent"],
        ["-Psolo"],
        ["--help"],
    ],
)
def test_no_split_once_the_user_picks_the_queues_or_another_pool(options: list[str]):
    assert split(*options) is None


def test_no_split_when_turned_off_or_without_a_function_queue():
    assert split(threads=0) is None
    assert plan([], [], CONTROL, 16) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (None, "control@%h"),
        ("", "control@%h"),
        ("w1@%h", "w1-control@%h"),
        ("node-7", "control@node-7"),  # Celery reads a bare -n as the host name
    ],
)
def test_the_control_worker_is_named_after_the_pool(name: str | None, expected: str):
    assert control_nodename(name) == expected


def test_control_threads_is_a_bounded_setting():
    assert Settings.from_env({}).control_threads == 64
    assert Settings.from_env({"TOOLFAN_CONTROL_THREADS": "0"}).control_threads == 0
    for bad in ("-1", "1001", "many"):
        with pytest.raises(SettingsError, match="TOOLFAN_CONTROL_THREADS"):
            Settings.from_env({"TOOLFAN_CONTROL_THREADS": bad})


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ([], None),
        (["-Q", "fn.add"], "fn.add"),
        (["-Qfn.add"], "fn.add"),
        (["--queues=fn.add,toolfan.submit"], "fn.add,toolfan.submit"),
        (["--queues", "fn.a", "-Q", "fn.b"], "fn.b"),  # the last one, as Celery reads it
        (["-Q"], None),
        (["--pidfile", "/run/w.pid"], None),
    ],
)
def test_an_option_s_value_in_each_spelling(options: list[str], expected: str | None):
    assert option_value(options, ("-Q", "--queues")) == expected


def test_only_a_worker_on_a_control_queue_talks_to_the_api():
    assert serves_control_queues([]) and serves_control_queues(["-Q", "fn.add,toolfan.poll"])
    assert not serves_control_queues(["-Q", "fn.add"])
    assert not serves_control_queues(["-Q", "toolfan.submit", "--queues=fn.add"])
