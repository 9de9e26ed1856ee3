"""The source registry: sources are found through entry points, never imported by the engine."""

from __future__ import annotations

import pytest

from dispatcher.check import check_sources
from tasks import sources


def test_the_agents_source_is_found_through_its_entry_point():
    from dispatcher.sources.agents import SOURCE

    assert sources.declared()["agents"] == "dispatcher.sources.agents:SOURCE"
    assert sources.get("agents") is SOURCE
    assert isinstance(SOURCE, sources.Source)


def test_a_worker_imports_the_trigger_tasks_and_the_sources_at_start():
    modules = sources.task_modules()
    assert "dispatcher.beat" in modules and "dispatcher.sources.agents" in modules
    from tasks.app import app

    assert "dispatcher.beat" in app.conf.include


def test_an_unknown_source_is_a_clear_error_naming_what_is_installed():
    with pytest.raises(sources.UnknownSource, match=r"'nope'.*installed: .*agents"):
        sources.get("nope")
    finding = check_sources(("agents", "nope"))
    assert not finding.ok and finding.fatal
    assert "reinstall toolfan" in finding.message


def test_a_registered_source_needs_no_entry_point():
    class Probe:
        name = "probe-source"

        def deliver(self, batch_id, results):
            raise AssertionError("not called")

    probe = sources.register(Probe())
    assert sources.get("probe-source") is probe
