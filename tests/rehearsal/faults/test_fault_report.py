"""Fault outcomes from hand-written timelines."""

from __future__ import annotations

from mtc_local.faults.report import fault_outcomes


def _steps(first: int, last: int, t0: float, dt: float = 1.0) -> list[dict]:
    return [{"ts": t0 + i * dt, "event": "step", "step": s} for i, s in enumerate(range(first, last + 1))]


def test_a_host_kill_then_a_local_restore_loses_the_steps_since_the_local_checkpoint():
    events = _steps(1, 14, 0.0) + [
        {"ts": 20.0, "event": "restore", "step": 12, "tier": "local", "duration_s": 0.3},
    ] + _steps(13, 20, 21.0)
    [outcome] = fault_outcomes([{"ts": 13.5, "kind": "sigkill_host", "slice": 0, "host": 0}], events)
    assert (outcome.last_step, outcome.restored_step, outcome.tier, outcome.steps_lost) == (14, 12, "local", 2)
    assert outcome.restore_s == 0.3 and outcome.recovery_s == 21.0 - 13.5
    assert outcome.target == "slice 0 host 0"


def test_a_preemption_with_autocheckpoint_loses_nothing_and_two_faults_are_told_apart():
    events = (
        _steps(1, 10, 0.0)
        + [{"ts": 15.0, "event": "restore", "step": 10, "tier": "persistent", "duration_s": 1.5}]
        + _steps(11, 30, 16.0)
        + [{"ts": 40.0, "event": "restore", "step": 28, "tier": "local", "duration_s": 0.2}]
        + _steps(29, 31, 41.0)
    )
    faults = [
        {"ts": 35.5, "kind": "sigkill_host", "slice": 1, "host": 0},
        {"ts": 9.5, "kind": "sigterm_slice", "slice": 1},
    ]
    preempt, kill = fault_outcomes(faults, events)
    assert (preempt.kind, preempt.steps_lost, preempt.tier, preempt.target) == ("sigterm_slice", 0, "persistent", "slice 1")
    assert (kill.last_step, kill.restored_step, kill.steps_lost) == (30, 28, 2)


def test_no_checkpoint_means_starting_over():
    events = _steps(1, 5, 0.0) + [{"ts": 10.0, "event": "start", "step": 0}] + _steps(1, 3, 11.0)
    [outcome] = fault_outcomes([{"ts": 5.5, "kind": "kill_slice", "slice": 0}], events)
    assert (outcome.restored_step, outcome.tier, outcome.steps_lost) == (0, None, 5)


def test_a_fault_the_run_never_recovered_from_has_no_restore():
    [outcome] = fault_outcomes([{"ts": 5.5, "kind": "hang", "slice": 0}], _steps(1, 5, 0.0))
    assert outcome.restored_step is None and outcome.steps_lost is None and outcome.recovery_s is None


def test_real_event_order_start_then_restore_per_process():
    """The workload writes `start` (JAX coming up) and then `restore`, per process."""
    events = _steps(1, 14, 0.0) + [
        {"ts": 20.0, "event": "start", "process": 0, "step": None},
        {"ts": 20.1, "event": "start", "process": 1, "step": None},
        {"ts": 26.0, "event": "restore", "process": 0, "step": 12, "tier": "local", "duration_s": 0.5},
        {"ts": 26.0, "event": "restore", "process": 1, "step": 12, "tier": "local", "duration_s": 0.5},
    ] + _steps(13, 20, 27.0)
    [outcome] = fault_outcomes([{"ts": 14.2, "kind": "sigkill_host", "slice": 0, "host": 0}], events)
    assert (outcome.restored_step, outcome.tier, outcome.steps_lost, outcome.restore_s) == (12, "local", 2, 0.5)


def test_a_listing_outage_is_reported_as_hitting_the_bucket_not_a_slice():
    """The runner records a bucket fault without slice or host (core.basics.vocabulary: scope "bucket")."""
    [outcome] = fault_outcomes([{"ts": 2.5, "kind": "listing_outage", "status": 503, "seconds": 6.0}],
                               _steps(1, 5, 0.0))
    assert outcome.target == "the bucket"


def test_run_restores_counts_each_start_once_however_many_processes_restored():
    """Every process of a start writes its own `restore` (rehearsal/mtc_local/workload/checkpointing.py `emit`)."""
    from mtc_local.faults.report import run_restores

    def restore(ts, process, step, tier):
        return {"ts": ts, "event": "restore", "process": process, "step": step, "tier": tier}

    events = _steps(1, 14, 0.0) + [
        restore(20.0, 0, 12, "local"), restore(20.1, 1, 12, "local"), restore(20.2, 2, 12, "persistent"),
        restore(20.3, 3, 12, "local"),
    ] + _steps(13, 13, 21.0) + [
        # a crash before the next save: the next start restores the same step again, on both processes
        restore(30.0, 1, 12, "local"), restore(30.0, 0, 12, "local"),
    ]
    restores = run_restores(events)
    assert [(r.ts, r.step, r.tiers) for r in restores] == [(20.0, 12, ("local", "persistent")), (30.0, 12, ("local",))]
    assert [r.describe() for r in restores] == ["step 12 (local/persistent)", "step 12 (local)"]
    assert [r.step for r in run_restores([restore(5.0, None, 3, "local"), restore(9.0, None, 3, "local")])] == [3, 3]
    assert run_restores(_steps(1, 3, 0.0)) == []
