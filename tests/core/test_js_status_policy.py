"""The status evaluator and the resubmission policy, over tables of real JobSet status shapes."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from tests.doubles.memory_jobset import status_completed, status_failed, status_restarting, status_running
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.attempt.resubmission import (FAIL, RETRY, SUCCEED, attempts_without_progress, decide,
                                                    decide_rejected)
from mtc_provider.core.attempt.status import JobSetState, evaluate_jobset
from tests.conftest import reference_file

FIRST_FAILED = "train-slice-1"
DONT_RETRY = status_failed("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action",
                           failed_job=FIRST_FAILED)
MAX_RESTARTS = status_failed(failed_job=FIRST_FAILED, restarts=3)
NO_POLICY = status_failed("FailedJobs", "jobset failed due to one or more job failures", failed_job="train-slice-0")
IMAGE = status_failed("FailedJobs", "pod train-slice-0-0 ErrImagePull: manifest unknown")
BAD_IMAGE_NAME = status_failed("FailedJobs", "pod train-slice-0-0 InvalidImageName: couldn't parse image name")
SUSPENDED = {"conditions": [{"type": "Suspended", "status": "True", "reason": "SuspendedJobs",
                             "message": "jobset is suspended"}]}
STARTUP_ONLY = {"conditions": [{"type": "StartupPolicyCompleted", "status": "True",
                                "reason": "InOrderStartupPolicyCompleted", "message": "in order startup policy has completed"}]}
STALE_FAILED = {"conditions": [{"type": "Failed", "status": "False", "reason": "ReachedMaxRestarts", "message": ""}],
                **status_running()}

STATUS_TABLE = [
    # status, phase, restarts, failed replicated job, reason, retryable
    ({}, "pending", 0, "", "", True),
    (SUSPENDED, "pending", 0, "", "SuspendedJobs", True),
    (STARTUP_ONLY, "pending", 0, "", "", True),
    (status_running(), "running", 0, "", "", True),
    (STALE_FAILED, "running", 0, "", "", True),
    (status_restarting(restarts=2), "restarting", 2, "slice", "Restarting", True),
    (status_completed(restarts=1), "succeeded", 1, "", "AllJobsCompleted", True),
    (MAX_RESTARTS, "failed", 3, "slice", "ReachedMaxRestarts", True),
    (NO_POLICY, "failed", 0, "slice", "FailedJobs", True),
    (DONT_RETRY, "failed", 0, "slice", "FailJobSetFailurePolicyAction", False),
    (IMAGE, "failed", 0, "slice", "FailedJobs", True),  # a pull error heals: retryable
    (BAD_IMAGE_NAME, "failed", 0, "slice", "FailedJobs", False),  # a malformed image name never does
    ({"terminalState": "Failed"}, "failed", 0, "", "FailedJobs", True),
]


def _jobset(status: dict) -> dict:
    return {"metadata": {"name": "train", "namespace": "ml", "resourceVersion": "7"},
            "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2}]}, "status": status}


@pytest.mark.parametrize(("status", "phase", "restarts", "rjob", "reason", "retryable"), STATUS_TABLE)
def test_evaluate_jobset_table(status, phase, restarts, rjob, reason, retryable):
    state = evaluate_jobset(_jobset(status))
    assert (state.phase, state.restarts, state.failed_replicated_job, state.reason, state.retryable) == (
        phase, restarts, rjob, reason, retryable)
    assert (state.name, state.namespace, state.resource_version) == ("train", "ml", "7")


def test_failed_job_comes_from_jobsets_message():
    state = evaluate_jobset(_jobset(DONT_RETRY))
    assert state.failed_job == FIRST_FAILED
    assert "FailJobSetFailurePolicyAction" in state.describe()


@pytest.mark.parametrize("crd", ["jobset-crd-v0.10.1.yaml", "jobset-crd-v0.12.0.yaml"])
def test_table_statuses_are_valid_jobset_status_shapes(crd):
    docs = list(yaml.safe_load_all(reference_file(crd).read_text()))
    crd_doc = next(d for d in docs if d and d.get("kind") == "CustomResourceDefinition")
    version = next(v for v in crd_doc["spec"]["versions"] if v["name"] == "v1alpha2")
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    for status, *_ in STATUS_TABLE:
        full = {"restarts": 0, "restartsCountTowardsMax": 0, **status}
        for condition in full.get("conditions", []):
            condition.setdefault("lastTransitionTime", "2026-01-01T00:00:00Z")
        jsonschema.validate(full, schema)


# --- resubmission -------------------------------------------------------------------------------
def _ended(status: dict) -> JobSetState:
    return evaluate_jobset(_jobset(status))


COMPLETED = _ended(status_completed())
RETRYABLE_FAIL = _ended(MAX_RESTARTS)
BUG = _ended(DONT_RETRY)

POLICY_TABLE = [
    # state, latest step, target, history (steps at attempt starts), N, expected kind, reason fragment
    (COMPLETED, 100, 100, [None], 2, SUCCEED, "reached its target"),
    (RETRYABLE_FAIL, 120, 100, [50], 2, SUCCEED, "reached its target"),  # progress decides, not the exit
    (BUG, 100, 100, [0], 2, SUCCEED, "reached its target"),
    (COMPLETED, 40, 100, [None], 2, RETRY, "completed below target"),  # MaxText exits 0 when preempted
    (RETRYABLE_FAIL, 40, 100, [None], 2, RETRY, "in-cluster restarts"),
    (RETRYABLE_FAIL, 40, 100, [20, 40], 2, RETRY, "ReachedMaxRestarts"),  # one attempt without progress
    (RETRYABLE_FAIL, 40, 100, [40, 40], 2, FAIL, "crash loop"),  # two in a row without progress
    (RETRYABLE_FAIL, None, 100, [None, None], 2, FAIL, "crash loop"),
    (COMPLETED, 40, 100, [40, 40], 2, FAIL, "crash loop"),
    (RETRYABLE_FAIL, 40, 100, [40, 40], 3, RETRY, "resubmitting"),
    (RETRYABLE_FAIL, 40, 100, [40], 1, FAIL, "crash loop"),
    (BUG, 40, 100, [None], 2, FAIL, "non-retryable"),
    # Image pulls heal (Kubernetes retries them with back-off; facts: only InvalidImageName and a missing
    # Secret/ConfigMap cannot): a Failed JobSet naming a pull error is retried; a malformed name is final.
    (_ended(IMAGE), None, 100, [None], 2, RETRY, "resubmitting"),
    (_ended(BAD_IMAGE_NAME), None, 100, [None], 2, FAIL, "InvalidImageName"),
]


@pytest.mark.parametrize(("state", "latest", "target", "history", "n", "kind", "fragment"), POLICY_TABLE)
def test_resubmission_policy_table(state, latest, target, history, n, kind, fragment):
    decision = decide(state, latest, target, history, n)
    assert decision.kind == kind
    assert fragment in decision.reason


@pytest.mark.parametrize(("history", "latest", "expected"), [
    ([None], None, 1), ([None], 0, 0), ([10, 20], 20, 1), ([10, 10], 10, 2), ([10, 5], 30, 0), ([], 3, 0),
])
def test_attempts_without_progress(history, latest, expected):
    assert attempts_without_progress(history, latest) == expected


@pytest.mark.parametrize(("status", "kind"), [(400, FAIL), (403, FAIL), (404, FAIL), (422, FAIL),
                                              (429, RETRY), (500, RETRY), (503, RETRY)])
def test_rejected_by_api(status, kind):
    assert decide_rejected(status, "nope").kind == kind


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"state": _ended(status_running())}, "state.phase"),
    ({"crash_loop_attempts": 0}, "crash_loop_attempts"),
    ({"step_history": []}, "step_history"),
])
def test_bad_policy_input_names_the_field(kwargs, field):
    args = {"state": COMPLETED, "latest_step": 1, "target_step": 10, "step_history": [None], **kwargs}
    with pytest.raises(SpecError) as err:
        decide(**args)
    assert err.value.field == field
