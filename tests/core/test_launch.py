"""What the launch operator does this try (core.attempt.launch.plan_launch), from plain JobSet dicts.

A JobSet is live until it has a Completed or Failed condition (kubernetes-sigs/jobset), and it is terminating
once `metadata.deletionTimestamp` is set (kubernetes.io/docs/concepts/architecture/garbage-collection/).
"""

from __future__ import annotations

import json

import pytest

from mtc_provider.core.basics import vocabulary as V
from mtc_provider.core.attempt.launch import (
    REATTACH,
    SUBMIT,
    TAKE_RESULT,
    WAIT_DELETION,
    LaunchPlan,
    attempt_of,
    history_of,
    needs_latest_step,
    plan_launch,
)

TARGET = 100


def jobset(name: str, attempt: int | None, phase: str = "running", history: list | None = None,
           terminating: bool = False) -> dict:
    labels = {} if attempt is None else {V.TRY_NUMBER_LABEL: str(attempt)}
    annotations = {} if history is None else {V.STEP_HISTORY_ANNOTATION: json.dumps(history)}
    metadata = {"name": name, "namespace": "default", "labels": labels, "annotations": annotations}
    if terminating:
        metadata["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    status: dict = {"replicatedJobsStatus": [{"name": "slice", "active": 2, "ready": 2}]}
    if phase == "completed":
        status = {"conditions": [{"type": V.CONDITION_COMPLETED, "status": "True",
                                  "reason": V.REASON_ALL_JOBS_COMPLETED}]}
    elif phase == "failed":
        status = {"conditions": [{"type": V.CONDITION_FAILED, "status": "True",
                                  "reason": V.REASON_REACHED_MAX_RESTARTS}]}
    return {"metadata": metadata, "status": status}


def test_no_attempt_yet_submits_the_first_with_the_newest_step():
    assert plan_launch([], [], None, TARGET) == LaunchPlan(SUBMIT, history=(None,), start_step=None)
    assert plan_launch([], [], 40, TARGET) == LaunchPlan(SUBMIT, history=(40,), start_step=40)


def test_a_live_attempt_is_reattached_with_the_locks_history_and_never_reads_the_listing():
    found = [jobset("a2", 2), jobset("a1", 1, "failed")]
    assert not needs_latest_step(found)
    plan = plan_launch(found, [None, 30], latest_step=999, target_step=TARGET)
    assert plan == LaunchPlan(REATTACH, "a2", attempt=2, history=(None, 30))


def test_reattach_without_a_lock_history_takes_the_attempts_annotation():
    plan = plan_launch([jobset("a1", 1, history=[None, 12])], [], None, TARGET)
    assert (plan.kind, plan.history) == (REATTACH, (None, 12))


def test_terminating_attempts_are_waited_for_even_when_phase_says_running():
    found = [jobset("a1", 1, terminating=True), jobset("a2", 2, "failed", terminating=True)]
    assert not needs_latest_step(found)
    assert plan_launch(found, [], 50, TARGET) == LaunchPlan(WAIT_DELETION, waiting_for=("a1", "a2"))


@pytest.mark.parametrize("phase", ["completed", "failed"])
def test_an_ended_attempt_past_the_target_is_the_result(phase):
    found = [jobset("a1", 1, "failed"), jobset("a2", 2, phase)]
    assert needs_latest_step(found)
    assert plan_launch(found, [None, 40], TARGET, TARGET) == LaunchPlan(TAKE_RESULT, "a2", 2, (None, 40))
    assert plan_launch(found, [], TARGET, TARGET).history == (None,)  # no history anywhere: one unknown start


def test_ended_attempts_below_the_target_are_deleted_and_the_next_carries_the_history_on():
    found = [jobset("a2", 2, "failed", history=[None, 20]), jobset("a1", 1, "completed", history=[None])]
    plan = plan_launch(found, [], 35, TARGET)
    # Ordered by try number, not by listing order: the newest attempt's annotation is the history.
    assert plan == LaunchPlan(SUBMIT, history=(None, 20, 35), to_delete=("a1", "a2"), start_step=35)
    assert plan_launch(found, [None, 20, 30], 35, TARGET).history == (None, 20, 30, 35)  # the lock wins


def test_completion_mode_takes_only_a_completed_attempt_as_the_result():
    assert plan_launch([jobset("e1", 1, "completed")], [], None, TARGET, completion=True).kind == TAKE_RESULT
    plan = plan_launch([jobset("e1", 1, "failed")], [], None, TARGET, completion=True)
    assert (plan.kind, plan.to_delete) == (SUBMIT, ("e1",))


def test_attempt_and_history_read_badly_labelled_jobsets_as_unknown():
    assert attempt_of(jobset("x", None)) == 0 and attempt_of({"metadata": {"labels": {V.TRY_NUMBER_LABEL: "two"}}}) == 0
    assert history_of(jobset("x", 1)) == []
    assert history_of({"metadata": {"annotations": {V.STEP_HISTORY_ANNOTATION: "not json"}}}) == []
    assert history_of({"metadata": {"annotations": {V.STEP_HISTORY_ANNOTATION: '{"a": 1}'}}}) == []
    assert history_of(jobset("x", 1, history=[None, 5, "7"])) == [None, 5, None]
