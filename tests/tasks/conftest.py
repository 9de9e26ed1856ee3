"""Fixtures of the engine's tests: a ledger on the test Redis, and a record of tool runs.

Nothing of ``tasks`` is imported at module level: pytest loads this file before the root
conftest's ``pytest_configure`` points the environment at the test databases (when a test
path below it is named), and the Celery app would keep the settings it read then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tasks.ledger import Ledger


@pytest.fixture
def ledger(redis_client) -> Ledger:
    """The ``agents`` source's ledger on the flushed test database."""
    from tasks.ledger import Ledger

    return Ledger(redis_client, ttl=3600, source="agents")


@pytest.fixture
def runs() -> list[str]:
    """What the test's tools did, in order: their side effects, counted."""
    return []
