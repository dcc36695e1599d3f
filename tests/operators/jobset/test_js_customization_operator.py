"""The launch operator passes `customization` through to the JobSet it submits, and refuses a bad one first."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.operators.jobset import MtcJobSetOperator

SECRET_VALUE = "hf_live_abcdefghijklmnopqrstuvwxyz"  # what the Secret holds in the cluster: never in Airflow


class FakeTI:
    dag_id, run_id, task_id, try_number = "d", "manual__1", "train", 1

    def __init__(self) -> None:
        self.xcom: dict = {}

    def xcom_push(self, key, value) -> None:
        self.xcom[key] = value


def operator(tmp_path, customization) -> MtcJobSetOperator:
    return MtcJobSetOperator(
        task_id="train",
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": "llama", "base_output_directory": str(tmp_path / "out"), "steps": 10},
        workload={"jobset_name": "llama"},
        customization=customization,
        deferrable=True,
        checkpoint_store_factory=lambda d, c: LocalCheckpointStore(),
    )


def test_the_submitted_jobset_carries_the_customization(tmp_path, cluster) -> None:
    op = operator(tmp_path, {"queue_name": "multislice-queue", "capacity": "spot", "shm_size": "8Gi",
                             "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}}})
    ti = FakeTI()
    with pytest.raises(TaskDeferred):
        op.execute({"ti": ti})
    (obj,) = cluster.objects.values()
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} \
        in pod["containers"][0]["env"]
    # Only the reference travels: the manifest, the XComs and the template field never hold the value.
    assert SECRET_VALUE not in json.dumps([obj, ti.xcom, op.customization])
    assert "customization" in MtcJobSetOperator.template_fields


def test_a_bad_customization_fails_before_any_jobset_is_created(tmp_path, cluster) -> None:
    op = operator(tmp_path, {"capacity": "cheap"})
    with pytest.raises(AirflowFailException, match="customization.capacity"):
        op.execute({"ti": FakeTI()})
    assert cluster.created == []


def test_an_override_of_the_failure_policy_is_refused_before_submission(tmp_path, cluster) -> None:
    op = operator(tmp_path, {"jobset_override": {"spec": {"failurePolicy": {"maxRestarts": 100}}}})
    with pytest.raises(AirflowFailException, match="spec.failurePolicy"):
        op.execute({"ti": FakeTI()})
    assert cluster.created == []
