"""Issue 4 acceptance: faults injected by the local runner into the real JAX/Orbax workload (no Airflow).

One fault-free reference run, one emergency-checkpointing run with a SIGKILL, a ramdisk wipe and a SIGTERM
preemption, and one persistent-only baseline with the same SIGKILL; same seed for all three. What each fault
cost is read with the core's `fault_outcomes` from the runner's fault records and the workload's events.
"""

from __future__ import annotations

import pytest

from tests.acceptance.conftest import L, P, STEPS, TrainingRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _describe(run: TrainingRun) -> str:
    return f"{run.run_name}: attempts {run.attempts}; faults {[o.to_dict() for o in run.outcomes().values()]}"


def test_reference_run_finishes_without_restarts(reference_run: TrainingRun):
    assert reference_run.finish is not None and reference_run.finish["step"] == STEPS, _describe(reference_run)
    assert [a["restarts"] for a in reference_run.attempts] == [0]
    assert not [e for e in reference_run.events if e["event"] == "restore"]


def test_faulted_run_ends_with_the_reference_parameters_bit_for_bit(faulted_run, reference_run):
    assert faulted_run.finish is not None and faulted_run.finish["step"] == STEPS, _describe(faulted_run)
    assert len(faulted_run.faults) == 3, faulted_run.faults  # every fault fired, each once
    assert faulted_run.sha256 == reference_run.sha256, _describe(faulted_run)


def test_sigkill_of_a_host_restores_the_local_tier_and_loses_at_most_two_local_periods(faulted_run):
    """Why 2L, not L: the local save of step kL is asynchronous. A SIGKILL after step s (kL <= s < (k+1)L)
    while that save is still in flight leaves (k-1)L as the newest complete local copy, so the loss is
    s - (k-1)L <= 2L - 1. With the save complete it is s - kL <= L - 1. The runner fires the fault a tick
    after it sees `completed step: 17` in a log, so s may be 17 or 18."""
    kill = faulted_run.outcomes()["sigkill_host"]
    assert kill.tier == "local", _describe(faulted_run)
    assert kill.restored_step is not None and kill.restored_step % L == 0
    assert kill.steps_lost is not None and kill.steps_lost <= 2 * L, _describe(faulted_run)
    assert kill.restore_s is not None and kill.recovery_s is not None


def test_wiped_ramdisk_restores_from_the_persistent_tier(faulted_run):
    wipe = faulted_run.outcomes()["wipe_ramdisk"]
    assert wipe.tier == "persistent", _describe(faulted_run)
    assert wipe.restored_step is not None and wipe.restored_step % P == 0 and wipe.restored_step > 0
    # The same async argument as for the local tier: at most two persistent periods, in practice under one.
    assert wipe.steps_lost is not None and wipe.steps_lost <= 2 * P, _describe(faulted_run)


def test_sigterm_with_autocheckpoint_loses_nothing(faulted_run):
    term = faulted_run.outcomes()["sigterm_slice"]
    assert term.steps_lost == 0, _describe(faulted_run)
    assert term.restored_step is not None and term.restored_step >= term.last_step
    preempted = [e for e in faulted_run.events if e["event"] == "preempted"]
    assert preempted and all(e["saved"] for e in preempted)
    # The workload exits 0 on a preemption, so the attempt ends Completed below the target and is resubmitted.
    assert faulted_run.attempts[0]["terminalState"] == "Completed" and len(faulted_run.attempts) == 2


def test_persistent_only_baseline_loses_up_to_a_checkpoint_period_and_more_than_emergency(baseline_run,
                                                                                          faulted_run,
                                                                                          reference_run):
    kill = baseline_run.outcomes()["sigkill_host"]
    emergency = faulted_run.outcomes()["sigkill_host"]
    assert kill.tier == "persistent" and kill.restored_step == (kill.last_step // P) * P, _describe(baseline_run)
    assert kill.steps_lost is not None and 0 < kill.steps_lost <= P
    assert kill.steps_lost > emergency.steps_lost, (_describe(baseline_run), _describe(faulted_run))
    assert baseline_run.sha256 == reference_run.sha256  # the plain CheckpointManager restores exactly too
