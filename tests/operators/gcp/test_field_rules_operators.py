"""The field rules of tests/core/test_field_rules.py through the operators a DAG uses, on the GKE target: each
refusal comes before any HTTP call. The doubles (tests/doubles) record every request they receive."""

from __future__ import annotations

import re

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.operators.gcp import MtcApplyCheckpointConfigurationOperator, MtcCreateTpuNodePoolsOperator
from mtc_provider.operators.jobset import MtcJobSetOperator
from mtc_provider.target import GkeTarget

from tests.support.gcp_fixtures import CLUSTER, LOCATION, PROJECT

SLICES = {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2, "machine_type": "ct6e-standard-4t"}
TARGET = GkeTarget(PROJECT, LOCATION, CLUSTER)


class TI:
    dag_id, run_id, task_id, try_number = "d", "manual__1", "train", 1

    def xcom_push(self, key: str, value: object) -> None:
        pass


def untouched(*doubles) -> bool:
    return all(double.requests == [] for double in doubles)


@pytest.mark.parametrize("customization, field", [
    ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]},
     "customization.tolerations[0].effect"),
    ({"volumes": [{"name": "data", "emptyDir": {}}],
      "volume_mounts": [{"name": "data", "mountPath": "/data", "subPath": "../secrets"}]},
     "customization.volume_mounts[0].subPath"),
    ({"node_selector": {"cloud.google.com/gke-spot": "true"}}, "customization.node_selector.cloud.google.com/gke-spot"),
    ({"jobset_override": {"spec": {"startupPolicy": {"startupPolicyOrder": "Sequential"}}}},
     "customization.jobset_override.spec.startupPolicy.startupPolicyOrder"),
    ({"jobset_override": {"spec": {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["workers"]}}}},
     "customization.jobset_override.spec.successPolicy.targetReplicatedJobs[0]"),
])
def test_the_launch_operator_refuses_before_any_call(container, k8s, gcs, gcp_connection, customization, field):
    op = MtcJobSetOperator(task_id="train", target=TARGET, slices=SLICES,
                           checkpointing={"run_name": "run", "base_output_directory": "gs://ckpt", "steps": 10},
                           workload={"jobset_name": "run", "image": "us-docker.pkg.dev/p/r/maxtext:1"},
                           customization=customization)
    with pytest.raises(AirflowFailException, match=f"invalid spec: {re.escape(field)}: "):
        op.execute({"ti": TI()})
    assert untouched(container, k8s, gcs)
    assert k8s.jobsets == {}


def test_the_launch_operator_refuses_max_restarts_above_the_bound_before_any_call(container, k8s, gcs,
                                                                                   gcp_connection):
    op = MtcJobSetOperator(task_id="train", target=TARGET, slices=SLICES,
                           checkpointing={"run_name": "run", "base_output_directory": "gs://ckpt", "steps": 10},
                           workload={"jobset_name": "run", "image": "us-docker.pkg.dev/p/r/maxtext:1",
                                     "max_restarts": 2**31 - 1})
    with pytest.raises(AirflowFailException, match="workload.max_restarts: 2147483647 is not allowed"):
        op.execute({"ti": TI()})
    assert untouched(container, k8s, gcs)


def test_the_node_pool_operator_refuses_a_prefix_gke_refuses_before_any_call(container, k8s, gcp_connection):
    op = MtcCreateTpuNodePoolsOperator(task_id="p", target=TARGET, api_endpoint=container.url, slices=SLICES,
                                       node_pool_prefix="1pool")
    with pytest.raises(SpecError) as caught:
        op.execute({})
    assert caught.value.field == "node_pool_prefix" and "starting with a letter" in caught.value.allowed
    assert untouched(container, k8s)


def test_the_checkpoint_configuration_operator_refuses_an_option_gcsfuse_discards_before_any_call(container, k8s,
                                                                                                   gcp_connection):
    op = MtcApplyCheckpointConfigurationOperator(task_id="c", target=TARGET, api_endpoint=container.url,
                                                 name="mtc-config", bucket_name="ckpt", slices=SLICES,
                                                 gcs_fuse_mount_options=["implicit-dirs", "key-file=/k.json"])
    with pytest.raises(SpecError) as caught:
        op.execute({})
    assert caught.value.field == "checkpoint_configuration.gcs_fuse_mount_options[1]"
    assert untouched(container, k8s)
    assert k8s.checkpoint_configurations == {}
