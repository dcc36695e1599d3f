"""The launch operator in a real Airflow (dag.test() on SQLite) with the in-memory JobSet api.

dag.test() in Airflow 3.3 does run retries: a task that fails with retries left goes UP_FOR_RETRY and
its loop schedules the next try once retry_delay has passed (0 here), so one dag.test() call plays out
every resubmission. Deferrable tries run their trigger inline.
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.jobset_fixtures import load_bundle_dags

from tests.support.js_helpers import finalize, jobset_body
from tests.support.js_helpers import ckpt_dir as _ckpt, reach as _reach
from tests.doubles.memory_jobset import (
    status_completed,
    status_failed,
    status_restarting,
    status_running,
)

pytestmark = pytest.mark.timeout(300)
LOGICAL = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture
def dags(monkeypatch, tmp_path, airflow_db):
    return load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")


def _run(dag):
    dr = dag.test(logical_date=LOGICAL, run_after=LOGICAL)
    ti = dr.get_task_instance("train")
    return dr, ti


@pytest.mark.parametrize("deferrable", [True, False])
def test_fails_twice_then_succeeds_after_two_resubmissions(dags, tmp_path, cluster, deferrable):
    cluster.plan(
        [status_running(), status_restarting(restarts=1), _reach(tmp_path, 20, status_failed(restarts=2))],
        [status_running(), _reach(tmp_path, 60, status_completed())],  # preempted: exit 0 below target
        [status_running(), _reach(tmp_path, 100, status_completed())],
    )
    dr, ti = _run(dags.retry_deferrable if deferrable else dags.retry_sync)
    assert dr.state == "success"
    # Both interrupted attempts made progress (-1 -> 20, 20 -> 60): the same try followed each (no retry spent)
    assert ti.try_number == 1
    assert len(cluster.created) == 3 and all(name.startswith("train-") for name in cluster.created)
    assert [n.rsplit("-", 1)[1] for n in cluster.created] == ["a1", "a2", "a3"]
    assert cluster.deleted == cluster.created[:2]  # ended attempts removed before the next one
    # ... each delete saying why (the header the cluster's audit records: tests/rehearsal/cluster/test_delete_audit.py)
    assert cluster.delete_reasons == [(name, "attempt-ended") for name in cluster.created[:2]]
    assert cluster.live() == cluster.created[2:]
    labels = cluster.get("default", cluster.created[2])["metadata"]
    assert labels["labels"]["mtc.airflow.apache.org/task-id"] == "train"
    assert labels["annotations"]["mtc.airflow.apache.org/step-history"] == "[null, 20, 60]"
    xcom = ti.xcom_pull(task_ids="train", key="jobset")
    assert xcom["attempt"] == 3 and xcom["last_step"] == 100 and "target" in xcom["reason"]


def test_dont_retry_failure_fails_at_once(dags, tmp_path, cluster):
    cluster.plan([status_running(), status_failed("FailJobSetFailurePolicyAction",
                                                   "applying FailJobSet failure policy action",
                                                   failed_job="train-slice-0")])
    dr, ti = _run(dags.dont_retry)
    assert dr.state == "failed" and ti.state == "failed"
    assert ti.try_number == 1 and len(cluster.created) == 1


def test_crash_loop_fails_for_good(dags, tmp_path, cluster):
    cluster.plan(*([[status_running(), status_failed(restarts=2)]] * 4))
    dr, ti = _run(dags.crash_loop)
    assert dr.state == "failed"
    assert len(cluster.created) == 2  # two attempts without any checkpoint, then no more resubmissions


def test_invalid_spec_fails_before_any_side_effect(dags, cluster):
    dr, ti = _run(dags.bad_spec)
    assert dr.state == "failed" and ti.try_number == 1 and cluster.created == []


def test_killed_mid_wait_then_rerun_reattaches(dags, tmp_path, cluster):
    def die(obj):
        # The try loses its watch mid-wait (the worker dies); nothing deletes the JobSet.
        raise RuntimeError("worker died")

    cluster.plan([status_running(), die, status_running(), _reach(tmp_path, 100, status_completed())])
    dag = dags.reattach
    dr, _ = _run(dag)
    assert dr.state == "failed" and cluster.live() == cluster.created and len(cluster.created) == 1
    dr, ti = _run(dag)  # the same run re-run: finds its live JobSet by labels
    assert dr.state == "success"
    assert len(cluster.created) == 1 and cluster.deleted == []
    assert ti.xcom_pull(task_ids="train", key="jobset")["jobset_name"] == cluster.created[0]


def test_a_live_jobset_of_the_same_run_name_from_another_dag_run_is_never_raced(dags, tmp_path, cluster):
    """Another DAG run (or a re-run of `airflow dags test`) is training run `llama`: no second writer."""
    from mtc_provider.core.basics import labels as L

    other = jobset_body()
    other["metadata"].update(name="llama-other-a1", labels={
        **L.run_labels("another_dag", "manual__yesterday", "train", "llama")})
    cluster.plan([status_running()])
    cluster.create("default", other)
    cluster.objects[("default", "llama-other-a1")]["status"] = status_running()
    dr, ti = _run(dags.retry_sync)
    assert dr.state == "failed" and ti.try_number == 1  # refused for good, not retried
    assert cluster.created == ["llama-other-a1"] and cluster.live() == ["llama-other-a1"]


@pytest.mark.parametrize("dag_name", ["sensor_deferrable", "sensor_poke"])
def test_sensor_waits_for_a_jobset_launched_elsewhere_and_never_deletes_it(dags, cluster, dag_name):
    cluster.plan([status_running(), status_restarting(restarts=1), status_completed(restarts=1)])
    body = jobset_body()
    body["metadata"]["name"] = "external"
    cluster.create("default", body)
    dr = getattr(dags, dag_name).test(logical_date=LOGICAL, run_after=LOGICAL)
    ti = dr.get_task_instance("wait")
    assert dr.state == "success"
    assert ti.xcom_pull(task_ids="wait")["restarts"] == 1
    assert cluster.deleted == []


def test_sensor_fails_for_good_when_the_jobset_fails(dags, cluster):
    cluster.plan([status_running(), status_failed(restarts=3)])
    body = jobset_body()
    body["metadata"]["name"] = "external"
    cluster.create("default", body)
    dr = dags.sensor_deferrable.test(logical_date=LOGICAL, run_after=LOGICAL)
    assert dr.state == "failed" and dr.get_task_instance("wait").try_number == 1
    assert cluster.live() == ["external"]


def test_cleanup_deletes_by_name_and_every_attempt_of_a_run_but_nothing_else(dags, cluster):
    from mtc_provider.core.basics import labels as L

    for name, labels in [
        ("external", {}),
        ("llama-a1", L.run_labels("mtc_cleanup", "RUN", "train", "llama")),
        ("llama-a2", L.run_labels("mtc_cleanup", "RUN", "train", "llama")),
        ("other-a1", L.run_labels("mtc_cleanup", "RUN", "train", "other")),
    ]:
        body = jobset_body()
        body["metadata"].update(name=name, labels=labels)
        cluster.create("default", body)
    from airflow.models.dagrun import DagRun
    from airflow.utils.types import DagRunType

    run_id = DagRun.generate_run_id(run_type=DagRunType.MANUAL, logical_date=LOGICAL, run_after=LOGICAL)
    for name in ("llama-a1", "llama-a2", "other-a1"):  # attempts of this DAG run's `train`
        cluster.objects[("default", name)]["metadata"]["labels"][L.RUN_ID] = L.label_value(run_id)
    dr = dags.cleanup.test(logical_date=LOGICAL, run_after=LOGICAL)
    assert dr.state == "success"
    assert sorted(cluster.deleted) == ["external", "llama-a1", "llama-a2"]  # checkpoints are not its business
    assert {reason for _, reason in cluster.delete_reasons} == {"teardown"}
    assert cluster.live() == ["other-a1"]
