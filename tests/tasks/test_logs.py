"""The JSON log line: its fields, and a timestamp exactly as ``datetime`` writes it."""

from __future__ import annotations

import json
import logging
import random
from datetime import UTC, datetime

import pytest

#: Instants where a cut instead of datetime's rounding to the microsecond shows: a
#: millisecond's last half microsecond, a second's, and a value a float cannot hold exactly.
EDGES = (
    0.0,
    1e-7,
    0.0009995,
    0.9999995,
    59.9995,
    1_739_129_383.0679998,
    1_956_487_898.9729997,
    1_733_400_000.9999996,
    1_733_400_000.999999,
    1_733_400_001.0,
)


def _record(created: float, **extra: object) -> logging.LogRecord:
    return logging.makeLogRecord({"created": created, "msg": "call %s", "args": ("ok",), **extra})


def _expected(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


def test_the_timestamp_is_datetimes_to_the_millisecond_across_seconds_in_any_order() -> None:
    from tasks.logs import JSONFormatter

    formatter, rng = JSONFormatter(), random.Random(16)
    instants = [*EDGES, *(rng.uniform(0, 2e9) for _ in range(20_000))]
    instants += [1_733_400_000 + rng.uniform(0, 3) for _ in range(20_000)]  # seconds recur
    wrong = [
        (created, line["ts"])
        for created in instants
        if (line := json.loads(formatter.format(_record(created))))["ts"] != _expected(created)
    ]
    assert wrong == []


def test_a_line_has_time_level_logger_message_then_the_extras_as_given() -> None:
    from tasks.logs import JSONFormatter

    record = _record(1_733_400_000.25, call_id="c\n1", elapsed_ms=0.5, function="é", seen={1})
    line = json.loads(JSONFormatter().format(record))
    assert list(line)[:4] == ["ts", "level", "logger", "message"]
    assert line["message"] == "call ok"
    assert line["call_id"] == "c\n1"
    assert line["elapsed_ms"] == 0.5
    assert line["seen"] == "{1}"  # what JSON cannot hold is written as its str()
    assert "é" in JSONFormatter().format(record)  # not escaped to \\u00e9


@pytest.mark.parametrize("created", [1_733_400_000.5, 1_733_399_999.5])
def test_a_second_seen_before_is_not_taken_for_the_one_cached(created: float) -> None:
    from tasks.logs import JSONFormatter

    formatter = JSONFormatter()
    formatter.format(_record(1_733_400_000.1))
    assert json.loads(formatter.format(_record(created)))["ts"] == _expected(created)
