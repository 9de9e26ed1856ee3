"""A CI-sized chaos run: 40 sessions, some of them Assistants runs, while pool processes,
whole workers and the API fail, with toolfan's default budgets: a killed worker's calls are
redone within seconds.

Same code as ``python -m tests.chaos.run``, on its own stack and its own Redis databases
(8 and 9), so it needs none of the suite's fixtures and never touches databases 14/15.
"""

import random

import pytest

from tests.chaos.plan import plan_faults, plan_sessions
from tests.chaos.run import ChaosConfig, config_seed_for_faults, run_chaos

CI = ChaosConfig(
    sessions=40,
    seed=9,
    duration=15.0,
    settle_timeout=60.0,
    quiet_period=2.0,
    mean_fault_interval=1.0,
    broker_db=8,
    ledger_db=9,
)


def test_ci_schedule_holds_every_kind_of_fault():
    faults = plan_faults(
        random.Random(config_seed_for_faults(CI)), CI.window, CI.mean_fault_interval
    )
    kinds = [f.kind for f in faults]
    assert {"kill_child", "kill_worker", "api_on", "api_off"} <= set(kinds)
    assert any("list" in f.knobs.get("endpoints", ()) for f in faults), "polls must meet faults"
    plan = plan_sessions(random.Random(CI.seed), CI.sessions, CI.runs_share)
    assert sum(s.run for s in plan) >= 5, "both sources must meet the faults"


@pytest.mark.timeout(240)
def test_chaos_run_answers_every_call_exactly_once():
    result = run_chaos(CI, progress=print)
    tally = result.tally
    print(tally.line())
    print(tally.details(CI.seed, result.elapsed))
    counts = (tally.lost, tally.duplicated, tally.rerun, tally.wrong, tally.late)
    assert counts == (0, 0, 0, 0, 0), "\n".join(
        [tally.line(), *tally.problems, f"logs: {result.logs}"]
    )
    assert tally.sessions == 40 and tally.runs >= 5
    assert tally.calls > 80
    assert tally.faults.child_kills >= 1
    assert tally.faults.worker_kills >= 3
    assert tally.faults.api_total >= 1
