"""The chaos schedule itself (pure, fast): replayable, complete, spread, and accepted by the runner's parser."""

from __future__ import annotations

import pytest
from chaos_schedule import AIRFLOW_KILL, ENDING_KINDS, MIX, make_schedule, seed_from_env

from mtc_provider.core.basics.errors import SpecError
from mtc_local.runner.faults import parse_plan


@pytest.mark.parametrize("seed", [0, 1, 7, 20261108, 99991])
def test_a_schedule_has_every_kind_at_distinct_spread_steps(seed):
    schedule = make_schedule(seed)
    kinds = [f.kind for f in schedule.faults]
    assert len(kinds) >= 10
    assert {k: kinds.count(k) for k in MIX} == MIX
    steps = [f.at_step for f in schedule.faults]
    assert steps == sorted(steps) and all(b - a >= 7 for a, b in zip(steps, steps[1:]))
    assert schedule.steps > steps[-1]
    # Every attempt-ending fault comes before the Airflow kill: the killed try waits on the last attempt.
    kill_at = schedule.airflow_kill_step
    assert all(f.at_step < kill_at for f in schedule.faults if f.kind in ENDING_KINDS)
    assert AIRFLOW_KILL not in {f["kind"] for f in schedule.fault_plan}


def test_the_same_seed_replays_the_same_schedule_and_another_seed_does_not():
    assert make_schedule(5) == make_schedule(5)
    assert make_schedule(5) != make_schedule(6)


def test_the_runner_accepts_the_plan_with_the_slices_and_hosts_it_names():
    schedule = make_schedule(3)
    parsed = parse_plan(schedule.fault_plan, num_slices=2, hosts_per_slice=1)
    assert [(f.kind, f.at_step, f.slice) for f in parsed] == [
        (f.kind, f.at_step, f.slice) for f in schedule.faults if f.kind != AIRFLOW_KILL]
    with pytest.raises(SpecError, match="slice"):
        parse_plan(schedule.fault_plan, num_slices=1, hosts_per_slice=1) if any(
            f.slice == 1 for f in parsed) else parse_plan([{"kind": "hang", "at_step": 1, "slice": 5}], 1, 1)


def test_the_seed_comes_from_the_environment_for_a_replay(monkeypatch):
    monkeypatch.setenv("MTC_CHAOS_SEED", "42")
    assert seed_from_env() == 42
    monkeypatch.delenv("MTC_CHAOS_SEED")
    assert seed_from_env(default=9) == 9
