"""The run's ledger (core.attempt.ledger): facts by identity, merged idempotently, bounded so a week-long run fits a
ConfigMap, and refused with the field, the value and what is allowed when they do not read."""

from __future__ import annotations

import json

import pytest

from mtc_provider.core.attempt.ledger import (FAILURE, HOST_LOSS, MAX_SAVES_PER_TIER, MAX_STEP_POINTS,
                                              NEXT_ATTEMPT_IN_TRY, PREEMPTION_NEW_ATTEMPT, STALL,
                                              DecisionEntry, Interruption, RunLedger, Save, Start, StepPoint,
                                              end_facts, thin_steps)
from mtc_provider.core.basics.errors import SpecError

T0 = 1_765_000_000.0


def _run() -> RunLedger:
    """Attempt 1 started, restarted once in the cluster after a host loss (restoring step 40 from the local tier),
    then preempted; attempt 2 followed in the same try."""
    return (RunLedger()
            .add_start(Start(1, 0, T0))
            .first_step(1, 0, T0 + 30)
            .add_steps([StepPoint(T0 + 30 + i, i + 1, 2.5 - i / 100, 1.0) for i in range(50)])
            .add_save(Save(T0 + 60, 40, "local"))
            .add_interruption(Interruption(T0 + 90, 1, HOST_LOSS, 40, restart=1))
            .add_start(Start(1, 1, T0 + 90))
            .restored(1, T0 + 100, 40, "local", 1.5)
            .add_save(Save(T0 + 120, 50, "persistent"))
            .add_interruption(Interruption(T0 + 150, 1, PREEMPTION_NEW_ATTEMPT, 50))
            .add_decision(DecisionEntry(T0 + 150, 1, NEXT_ATTEMPT_IN_TRY, "completed below target"))
            .add_start(Start(2, 0, T0 + 160)))


def test_the_dict_shape_others_read():
    data = _run().to_dict()
    assert list(data) == ["version", "starts", "steps", "saves", "interruptions", "decisions"]
    assert data["version"] == 1
    assert data["starts"][1] == {"attempt": 1, "restart": 1, "at": T0 + 90, "first_step_at": None,
                                 "restored_step": 40, "restored_tier": "local", "restore_seconds": 1.5}
    assert data["starts"][0]["first_step_at"] == T0 + 30
    assert data["steps"][0] == [T0 + 30, 1, 2.5, 1.0]
    assert data["saves"] == [{"at": T0 + 60, "step": 40, "tier": "local", "complete": True},
                             {"at": T0 + 120, "step": 50, "tier": "persistent", "complete": True}]
    assert data["interruptions"] == [
        {"at": T0 + 90, "attempt": 1, "kind": "host-loss", "step": 40, "restart": 1},
        {"at": T0 + 150, "attempt": 1, "kind": "preemption-new-attempt", "step": 50, "restart": None}]
    assert data["decisions"] == [{"at": T0 + 150, "attempt": 1, "kind": "next-attempt-in-try",
                                  "reason": "completed below target"}]
    assert RunLedger.from_dict(json.loads(json.dumps(data))) == _run()


def test_merging_the_same_facts_again_changes_nothing_and_two_writers_add_up():
    ledger = _run()
    assert ledger.merge(ledger) == ledger
    assert ledger.merge(RunLedger()) == ledger == RunLedger().merge(ledger)
    # a second copy of the trigger saw the same restart later, and the first step of attempt 2
    other = (RunLedger().add_start(Start(1, 1, T0 + 95))
             .add_interruption(Interruption(T0 + 95, 1, HOST_LOSS, 40, restart=1))
             .add_start(Start(2, 0, T0 + 161)).first_step(2, 0, T0 + 200))
    both = ledger.merge(other)
    assert both == other.merge(ledger)
    assert both.merge(other) == both
    assert [(s.attempt, s.restart, s.at, s.first_step_at) for s in both.starts] == [
        (1, 0, T0, T0 + 30), (1, 1, T0 + 90, None), (2, 0, T0 + 160, T0 + 200)]
    assert [i.kind for i in both.interruptions] == [HOST_LOSS, PREEMPTION_NEW_ATTEMPT]  # restart 1 once
    assert both.starts[1].restored_tier == "local"  # the restore one writer saw is kept
    # an orchestrator fault is a fact each time it happens; the attempt's end still ends it once
    faults = [Interruption(T0 + 100, 1, "orchestrator-fault", 40), Interruption(T0 + 120, 1, "orchestrator-fault", 40)]
    with_faults = RunLedger(interruptions=tuple(faults)).merge(ledger)
    assert [i.kind for i in with_faults.interruptions] == [
        HOST_LOSS, "orchestrator-fault", "orchestrator-fault", PREEMPTION_NEW_ATTEMPT]
    assert with_faults.merge(with_faults) == with_faults


@pytest.mark.parametrize("first, then, kept", [
    (Save(T0, 80, "replicator", complete=False), Save(T0 + 5, 80, "replicator", complete=True), True),
    (Save(T0, 80, "replicator", complete=True), Save(T0 + 5, 80, "replicator", complete=False), True),
    (Save(T0, 80, "replicator", complete=False), Save(T0 + 5, 80, "replicator", complete=False), False),
])
def test_a_backup_completes_and_never_uncompletes(first, then, kept):
    saves = RunLedger().add_save(first).add_save(then).saves
    assert [(s.step, s.complete) for s in saves] == [(80, kept)]


def test_saves_keep_the_newest_per_tier():
    ledger = RunLedger()
    for step in range(MAX_SAVES_PER_TIER + 20):
        ledger = ledger.add_save(Save(T0 + step, step, "local"))
    ledger = ledger.add_save(Save(T0, 5, "persistent"))
    local = [s.step for s in ledger.saves if s.tier == "local"]
    assert local == list(range(20, MAX_SAVES_PER_TIER + 20))
    assert [s.step for s in ledger.saves if s.tier == "persistent"] == [5]


def test_restore_goes_to_the_start_running_then():
    ledger = RunLedger().add_start(Start(1, 0, T0)).add_start(Start(1, 1, T0 + 100))
    assert ledger.restored(1, T0 + 50, 10, "persistent").starts[0].restored_step == 10
    assert ledger.restored(1, T0 + 150, 20, "local").starts[1].restored_step == 20
    assert ledger.restored(2, T0, 20) == ledger  # no start of that attempt: nothing to attach it to


def test_a_week_at_a_step_every_2_s_fits_a_configmap():
    week, ledger = 7 * 24 * 3600, RunLedger().add_start(Start(1, 0, T0))
    for hour in range(0, week, 3600):  # as the trigger flushes: a batch at a time
        batch = [StepPoint(T0 + t, t // 2, 1.234567, 2.281) for t in range(hour, hour + 3600, 2)]
        ledger = ledger.add_steps(batch).add_save(Save(T0 + hour, hour // 2, "persistent"))
    for n in range(60):  # dozens of interruptions, each with its restart and a long reason
        at = T0 + n * 10_000
        ledger = (ledger.add_interruption(Interruption(at, 1, HOST_LOSS, n, restart=n + 1))
                  .add_start(Start(1, n + 1, at, at + 100, n, "local", 3.25))
                  .add_decision(DecisionEntry(at, n + 1, "retry", "x" * 1000)))
    steps = ledger.steps
    assert len(steps) <= MAX_STEP_POINTS
    assert steps[0].at == T0 and steps[-1].at == T0 + week - 2  # the first and the newest point
    gaps = [b.at - a.at for a, b in zip(steps, steps[1:])]
    assert max(gaps) <= 4 * week / MAX_STEP_POINTS  # an even spread: no hole in the week
    assert len(steps) >= MAX_STEP_POINTS // 4
    assert len(json.dumps(ledger.to_dict())) < 200_000


def test_thinning_fewer_points_than_the_limit_keeps_them_all():
    points = [StepPoint(T0 + i, i) for i in range(10)]
    assert thin_steps(points, 10) == tuple(points)
    assert thin_steps(points[::-1] + points, 10) == tuple(points)  # ordered, each once
    thinned = thin_steps(points, 4)
    assert len(thinned) <= 4 and (thinned[0], thinned[-1]) == (points[0], points[-1])
    assert thin_steps(thin_steps(points, 4), 4) == thin_steps(points, 4)


@pytest.mark.parametrize("outcome, interruption, in_try, cause, want", [
    ("disrupted", "graceful", True, None, PREEMPTION_NEW_ATTEMPT),
    ("disrupted", "failed", False, None, FAILURE),
    ("disrupted", "failed", True, STALL, STALL),
    ("failed", None, False, "startup-timeout", "startup-timeout"),
    ("failed", None, False, None, FAILURE),
    ("finished", None, False, None, None),
])
def test_an_attempt_s_end_in_the_ledger_s_words(outcome, interruption, in_try, cause, want):
    found, decided = end_facts(at=T0, attempt=3, kind="retry", reason="why", outcome=outcome,
                               interruption=interruption, in_try=in_try, step=40, cause=cause)
    assert (found.kind if found else None) == want
    assert found is None or (found.attempt, found.step, found.restart) == (3, 40, None)
    assert decided == DecisionEntry(T0, 3, NEXT_ATTEMPT_IN_TRY if in_try else "retry", "why")


@pytest.mark.parametrize("data, field, allowed", [
    ([], "ledger", "a mapping"),
    ({"version": 2}, "ledger.version", "1"),
    ({"version": 1, "starts": {}}, "ledger.starts", "a list"),
    ({"version": 1, "starts": [{"attempt": 0, "restart": 0, "at": T0}]}, "ledger.starts[0].attempt", ">= 1"),
    ({"version": 1, "starts": [{"attempt": 1, "restart": 0, "at": T0, "restored_tier": "ssd"}]},
     "ledger.starts[0].restored_tier", "local, replicator, persistent"),
    ({"version": 1, "steps": [[T0, 1, None]]}, "ledger.steps[0]", "[at, step, loss or null, step_seconds or null]"),
    ({"version": 1, "steps": [[T0, "7", None, None]]}, "ledger.steps[0].step", "an integer"),
    ({"version": 1, "steps": [[-1, 7, None, None]]}, "ledger.steps[0].at", "unix seconds"),
    ({"version": 1, "saves": [{"at": T0, "step": 1, "tier": "disk"}]}, "ledger.saves[0].tier", "persistent"),
    ({"version": 1, "saves": [{"at": T0, "step": 1, "tier": "local", "complete": "yes"}]},
     "ledger.saves[0].complete", "true or false"),
    ({"version": 1, "interruptions": [{"at": T0, "attempt": 1, "kind": "oops"}]}, "ledger.interruptions[0].kind",
     "preemption, preemption-new-attempt, host-loss, stall, startup-timeout, orchestrator-fault, failure"),
    ({"version": 1, "decisions": [{"at": T0, "attempt": 1, "kind": "maybe", "reason": ""}]},
     "ledger.decisions[0].kind", "succeed, retry, fail, next-attempt-in-try"),
    ({"version": 1, "decisions": [{"at": T0, "attempt": 1, "kind": "fail", "reason": None}]},
     "ledger.decisions[0].reason", "a string"),
])
def test_bad_input_is_refused_naming_the_field_the_value_and_what_is_allowed(data, field, allowed):
    with pytest.raises(SpecError) as caught:
        RunLedger.from_dict(data)
    assert caught.value.field == field
    assert allowed in caught.value.allowed


def test_no_ledger_yet_is_the_empty_one_and_a_nan_loss_is_null():
    assert RunLedger.from_dict({}) == RunLedger()
    diverged = RunLedger().add_steps([StepPoint(T0, 3, float("nan"), 2.0)])
    assert diverged.to_dict()["steps"] == [[T0, 3, None, 2.0]]  # standard JSON: a browser parses it
    with pytest.raises(SpecError, match=r"ledger.steps\[0\].loss: nan is not allowed; allowed: a finite number"):
        RunLedger.from_dict({"version": 1, "steps": [[T0, 3, float("nan"), None]]})
    with pytest.raises(SpecError, match="interruption.kind"):
        RunLedger().add_interruption(Interruption(T0, 1, "reboot"))
    assert RunLedger().add_decision(DecisionEntry(T0, 1, "fail", "y" * 5000)).decisions[0].reason == "y" * 300
