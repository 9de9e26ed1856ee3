"""The half-load phases' CPU by process: each child of the bench counted under its role."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import IO, Any, cast

import pytest

from bench.phases import ServicesCpu, _untracked_role, arrivals, busiest, cpu_totals
from bench.stack import BenchStack

pytestmark = pytest.mark.quick

#: A child that, at each line on stdin, burns 0.3 s of CPU and says so.
BURNER = """
import sys, time
for _ in sys.stdin:
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    print("done", flush=True)
"""


@contextmanager
def burner() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield child
    finally:
        child.kill()
        child.wait(10)


def _burn(*children: subprocess.Popen[str]) -> None:
    for child in children:
        cast(IO[str], child.stdin).write("go\n")
        cast(IO[str], child.stdin).flush()
    for child in children:
        assert cast(IO[str], child.stdout).readline() == "done\n"


def test_each_child_counts_under_its_role_and_toolfan_leaves_out_the_api() -> None:
    with burner() as intake, burner() as api, burner() as stranger:
        stack: Any = SimpleNamespace(roles={intake.pid: "intake", api.pid: "api"})
        cpu = ServicesCpu(cast(BenchStack, stack))
        _burn(intake, api, stranger)
        split = cpu.per_call(1000)  # 1000 calls: 0.3 s each is 0.3 ms per call

    for role in ("intake", "api", "other"):  # other: the stranger, and any other child
        assert split[role] >= 0.29, split
    assert split["intake"] < 0.45 and split["api"] < 0.45, split
    totals = cpu_totals(split)
    # Neither the API nor the suite's own Redis (a child too, when the suite started it).
    ours = sum(v for k, v in split.items() if k not in ("api", "redis"))
    assert totals["toolfan"] == pytest.approx(ours)
    assert totals["emulator"] == split["api"]
    assert totals["redis"] == split.get("redis", 0.0)  # the suite's own Redis, if it started one


def test_a_redis_server_child_is_redis_not_toolfan() -> None:
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is needed (the suite starts one when none answers)"
    child = subprocess.Popen([binary, "--port", "0", "--save", ""], stdout=subprocess.DEVNULL)
    try:
        assert _untracked_role(child.pid) == "redis"
    finally:
        child.kill()
        child.wait(10)
    assert _untracked_role(child.pid) == "other"  # gone: nothing to count
    totals = cpu_totals({"workers": 2.0, "redis": 0.5, "api": 0.25})
    assert totals == {"toolfan": 2.0, "emulator": 0.25, "redis": 0.5}


def test_the_busiest_stretch_counts_a_burst_the_average_hides() -> None:
    steady = [i / 8 for i in range(120)]  # 8 a second for 15 s (exact binary fractions)
    burst = sorted([*steady, *(7 + i / 100 for i in range(30))])  # 30 more within 0.3 s

    assert busiest(steady, 5.0) == pytest.approx(8.0)
    assert busiest(burst, 5.0) == pytest.approx(14.0)  # (40 + 30) in the 5 s holding it
    assert len(burst) / 15 == pytest.approx(10.0)  # what the run's average says
    assert busiest([], 5.0) == 0.0
    assert busiest([3.0], 5.0) == pytest.approx(0.2)


def test_a_busiest_window_must_be_positive() -> None:
    for window in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="window"):
            busiest([1.0], window)


def test_seeded_runs_differ_in_their_busiest_stretch() -> None:
    # The bench's default seeds: the third run's arrivals carry a busier stretch than the
    # first's at the same average rate, which is why each run's figure is reported.
    rate = 60.4
    first, third = (busiest(arrivals(rate, 15.0, seed)) for seed in (1, 3))
    assert third > 1.05 * rate > first
