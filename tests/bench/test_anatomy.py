"""``python -m bench anatomy``: every part weighed, and another bench's database left alone."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.anatomy import PARTS, WHOLE
from bench.stack import OWNER_KEY
from tests.bench.runs import run_bench
from tests.services import ROOT

#: The suite's results database, flushed for every test anyway (as in test_owner.py).
DB = "15"


def _url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}"


@pytest.fixture(scope="module")
def anatomy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("anatomy")
    ran = run_bench(["anatomy", "--calls", "50", "--rounds", "2"], out, "anatomy.json", 120)
    return {**ran, "text": (out / "anatomy.txt").read_text()}


@pytest.mark.timeout(130)
def test_every_part_and_body_is_weighed_and_the_rest_is_what_they_leave(
    anatomy: dict[str, Any],
) -> None:
    doc = anatomy["json"]
    figures = doc["figures"]
    assert set(figures) == {name for name, _ in PARTS} | set(WHOLE)
    for name, figure in figures.items():
        assert len(figure["rounds"]) == 2, name
        assert all(math.isfinite(v) and v > 0 for v in figure["rounds"]), name
        assert min(figure["rounds"]) <= figure["us"] <= max(figure["rounds"]), name
    body = figures["execute"]["us"]
    assert doc["parts_us"] == pytest.approx(sum(figures[n]["us"] for n, _ in PARTS))
    assert doc["rest_us"] == pytest.approx(body - doc["parts_us"])
    assert doc["execute_vs_floor_call"] == pytest.approx(body / figures["floor_call"]["us"])
    for name, _ in PARTS:
        assert f"  {name} " in anatomy["text"], name
    assert "execute body" in anatomy["text"]


@pytest.mark.timeout(60)
def test_it_stops_on_a_database_another_bench_holds_and_flushes_nothing(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    target = redis.Redis.from_url(f"{_url(redis_client)}/{DB}")
    target.set(OWNER_KEY, "pid 1 on elsewhere", ex=60)
    target.set("their:record", "kept")
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench",
                "anatomy",
                "--redis-url",
                f"{_url(redis_client)}/0",
                "--ledger-db",
                DB,
                "--calls",
                "5",
                "--rounds",
                "1",
                "--out",
                str(tmp_path),
            ],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=50,
            check=False,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert "another bench (pid 1 on elsewhere)" in done.stderr
        assert target.get("their:record") == b"kept"
        assert target.get(OWNER_KEY) == b"pid 1 on elsewhere"
        assert not (tmp_path / "anatomy.json").exists()
    finally:
        target.delete(OWNER_KEY, "their:record")
        target.close()
