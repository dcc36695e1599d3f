"""The soak's fault schedule (soak_schedule.py): seeded, so a failing soak replays with the same faults in the same
order and spacing; every orchestrator fault once; the runner's plan valid for the DAG's two slices."""

from __future__ import annotations

from mtc_local.runner.faults import parse_plan
from tests.deploy import soak_schedule as S


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another_order():
    assert S.make_schedule(7) == S.make_schedule(7)
    orders = {tuple(f.kind for f in S.make_schedule(seed).faults) for seed in range(20)}
    assert len(orders) > 1


def test_every_orchestrator_fault_once_spaced_after_the_previous_one_ended():
    schedule = S.make_schedule(S.DEFAULT_SEED)
    assert sorted(f.kind for f in schedule.faults) == sorted(S.KINDS)
    for before, after in zip(schedule.faults, schedule.faults[1:]):
        assert after.at_s - before.ends_s >= 20.0, (before, after)
    outage = next(f for f in schedule.faults if f.kind == S.API_OUTAGE)
    assert outage.seconds == 120.0  # the 2 minutes (503, then refused connections)


def test_airflows_own_faults_database_broker_and_an_api_server_kill_aimed_at_the_last_resume():
    """Issue #33 item 11: the database unreachable 60-75 s, the broker unreachable, an api-server killed during
    train's resume (the resume at training's end: the schedule puts it last)."""
    for seed in range(10):
        faults = S.make_schedule(seed).faults
        database = next(f for f in faults if f.kind == S.DATABASE_OUTAGE)
        assert 60.0 <= database.seconds <= 75.0
        assert next(f for f in faults if f.kind == S.BROKER_OUTAGE).seconds >= 60.0
        assert faults[-1].kind == S.APISERVER_KILL and faults[-1].seconds == S.APISERVER_DOWN_S


def test_the_runner_plan_restarts_with_an_image_pull_then_fails_one_attempt():
    plan = S.make_schedule(S.DEFAULT_SEED).fault_plan
    faults = parse_plan(list(plan), num_slices=2, hosts_per_slice=1)
    kill, pull, failure = faults
    assert (kill.kind, pull.kind, failure.kind) == ("sigkill_host", "image_pull", "sigkill_host")
    assert pull.slice == kill.slice and pull.holds_at(1) and not pull.holds_at(0)
    assert failure.at_seconds > kill.at_seconds and failure.slice != kill.slice
