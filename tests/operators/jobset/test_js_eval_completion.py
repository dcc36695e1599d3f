"""wait_for="completion": a one-shot JobSet (an evaluation) is done when it completes, with no checkpoints.

The pure decision is table-tested; the operator runs in a real Airflow (dag.test() on SQLite) with the
in-memory JobSet api, and a checkpoint store factory that fails the task if completion mode opens a store.
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.jobset_fixtures import load_bundle_dags

from tests.doubles.memory_jobset import (
    status_completed,
    status_failed,
    status_running,
)
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.attempt.resubmission import FAIL, RETRY, SUCCEED, decide_on_completion
from mtc_provider.core.attempt.status import FAILED, RUNNING, SUCCEEDED, JobSetState

pytestmark = pytest.mark.timeout(300)
LOGICAL = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _state(phase: str, retryable: bool = True, restarts: int = 0, reason: str = "") -> JobSetState:
    return JobSetState(name="eval-a1", namespace="default", phase=phase, restarts=restarts, reason=reason,
                       message="m", retryable=retryable)


@pytest.mark.parametrize("state, kind, words", [
    (_state(SUCCEEDED), SUCCEED, "completed after 0"),
    (_state(SUCCEEDED, restarts=2), SUCCEED, "completed after 2"),
    (_state(SUCCEEDED, retryable=False), SUCCEED, "completed"),
    (_state(FAILED, retryable=False, reason="FailJobSetFailurePolicyAction"), FAIL, "non-retryable failure: Fail"),
    (_state(FAILED, restarts=1, reason="ReachedMaxRestarts"), RETRY, "after 1 in-cluster restarts: ReachedMax"),
])
def test_decide_on_completion_table(state, kind, words):
    decision = decide_on_completion(state)
    assert decision.kind == kind
    assert words in decision.reason


def test_decide_on_completion_refuses_a_jobset_that_has_not_ended():
    with pytest.raises(SpecError) as err:
        decide_on_completion(_state(RUNNING))
    assert err.value.field == "state.phase" and SUCCEEDED in str(err.value)


@pytest.fixture
def eval_dags(monkeypatch, tmp_path, airflow_db):
    return load_bundle_dags(monkeypatch, tmp_path, "mtc_eval_dags.py")


def _run(dag):
    dr = dag.test(logical_date=LOGICAL, run_after=LOGICAL)
    return dr, dr.get_task_instance("evaluate")


@pytest.mark.parametrize("deferrable", [True, False])
def test_completed_jobset_succeeds_without_any_checkpoint(eval_dags, cluster, deferrable, tmp_path):
    cluster.plan([status_running(), status_running(), status_completed()])
    dr, ti = _run(eval_dags.eval_deferrable if deferrable else eval_dags.eval_sync)
    assert dr.state == "success" and ti.try_number == 1
    assert not list(tmp_path.rglob("mtc-attempts.json"))  # an evaluation never writes a training run's record
    assert len(cluster.created) == 1 and cluster.deleted == []
    xcom = ti.xcom_pull(task_ids="evaluate", key="jobset")
    assert xcom["last_step"] is None and "completed" in xcom["reason"]
    body = cluster.get("default", cluster.created[0])
    assert body["metadata"]["annotations"]["mtc.airflow.apache.org/step-history"] == "[null]"


def test_retryable_failures_are_resubmitted_without_crash_loop_detection(eval_dags, cluster):
    """Two failures in a row with no checkpoints would be a crash loop for training; an evaluation retries."""
    cluster.plan(
        [status_running(), status_failed(restarts=1)],
        [status_running(), status_failed(restarts=1)],
        [status_running(), status_completed()],
    )
    dr, ti = _run(eval_dags.eval_deferrable)
    assert dr.state == "success" and ti.try_number == 3
    assert [n.rsplit("-", 1)[1] for n in cluster.created] == ["a1", "a2", "a3"]
    assert cluster.deleted == cluster.created[:2]
    annotations = cluster.get("default", cluster.created[2])["metadata"]["annotations"]
    assert annotations["mtc.airflow.apache.org/step-history"] == "[null, null, null]"


def test_non_retryable_failure_fails_at_once(eval_dags, cluster):
    cluster.plan([status_running(), status_failed("FailJobSetFailurePolicyAction",
                                                   "applying FailJobSet failure policy action",
                                                   failed_job="eval-slice-0")])
    dr, ti = _run(eval_dags.eval_deferrable)
    assert dr.state == "failed" and ti.try_number == 1 and len(cluster.created) == 1


def test_bad_wait_for_fails_before_creating_anything(eval_dags, cluster):
    dr, ti = _run(eval_dags.eval_bad_wait_for)
    assert dr.state == "failed" and ti.try_number == 1 and cluster.created == []


def test_bad_wait_for_error_names_the_field_and_the_allowed_values():
    from airflow.sdk.exceptions import AirflowFailException

    from mtc_provider.operators.jobset import MtcJobSetOperator

    op = MtcJobSetOperator(task_id="t", slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
                           checkpointing={"run_name": "r", "base_output_directory": "/tmp/x", "steps": 1},
                           workload={"jobset_name": "eval"}, wait_for="finish")
    with pytest.raises(AirflowFailException) as err:
        op._specs()
    assert "wait_for" in str(err.value) and "checkpoint or completion" in str(err.value)
