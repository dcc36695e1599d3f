"""DAGs for tests/operators/gcp/test_dag.py, parsed by dag.test() from this bundle; endpoints come from the environment."""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG

from mtc_provider.operators.gcp import (
    MtcApplyCheckpointConfigurationOperator,
    MtcClusterReadinessOperator,
    MtcCreateBucketOperator,
    MtcCreateTpuNodePoolsOperator,
    MtcEnableCheckpointingOperator,
    MtcGrantBucketAccessOperator,
)
from mtc_provider.sensors.gcp import MtcClusterReadinessSensor
from mtc_provider.target import GkeTarget, LocalTarget

PROJECT, LOCATION, CLUSTER = "proj-42", "us-central1", "mtc"
SLICES = {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2, "machine_type": "ct6e-standard-4t"}
SIZING = {"parameters": 7e9}
URL = os.environ.get("MTC_TEST_CONTAINER_URL", "http://127.0.0.1:9")
HOME = os.environ.get("MTC_TEST_LOCAL_HOME", "/tmp/mtc-test-local")
START = datetime.datetime(2026, 1, 1)

def gke_dag(container_url):
    """The sample setup DAG's order (dags/mtc_cluster_setup.py): readiness first, then every change."""
    from mtc_provider.core.definition.cluster.readiness import setup_fixable

    target = GkeTarget(PROJECT, LOCATION, CLUSTER)
    common = {"target": target, "api_endpoint": container_url, "poll_interval": 0.05}
    with DAG("mtc_gcp_setup", schedule=None, start_date=START) as dag:
        first = MtcClusterReadinessOperator(
            task_id="readiness", slices=SLICES, retries=0,
            fixed_by_later_tasks=setup_fixable({"enable_mtc": True, "create_node_pools": True}), **common)
        enable = MtcEnableCheckpointingOperator(task_id="enable", deferrable=True, **common)
        bucket = MtcCreateBucketOperator(task_id="bucket", bucket_name="ckpt", bucket_location="us-central1", **common)
        grant = MtcGrantBucketAccessOperator(task_id="grant", bucket_name="ckpt", workload_namespace="training",
                                             workload_service_account="trainer",
                                             resource_manager_endpoint=container_url, **common)
        config = MtcApplyCheckpointConfigurationOperator(task_id="config", name="mtc-config", bucket_name="ckpt",
                                                         slices=SLICES, sizing=SIZING, **common)
        pools = MtcCreateTpuNodePoolsOperator(task_id="pools", slices=SLICES, node_locations=["us-central1-b"],
                                              **common)
        ready = MtcClusterReadinessSensor(task_id="ready", target=target, slices=SLICES, api_endpoint=container_url,
                                          checkpoint_configuration_name="mtc-config", poke_interval=0.1, timeout=30)
        first >> enable >> bucket >> grant >> config >> pools >> ready
    return dag


gke_setup = gke_dag(URL)

with DAG("mtc_gcp_not_ready", schedule=None, start_date=START) as not_ready:
    MtcClusterReadinessOperator(task_id="check", target=GkeTarget(PROJECT, LOCATION, CLUSTER), slices=SLICES,
                                api_endpoint=URL)

local_target = LocalTarget(home=HOME)
with DAG("mtc_local_setup", schedule=None, start_date=START) as local_setup:
    ready = MtcClusterReadinessOperator(task_id="ready", target=local_target, slices=SLICES, sizing={"parameters": 1e6})
    enable = MtcEnableCheckpointingOperator(task_id="enable", target=local_target)
    bucket = MtcCreateBucketOperator(task_id="bucket", target=local_target, bucket_name="ckpt")
    grant = MtcGrantBucketAccessOperator(task_id="grant", target=local_target, bucket_name="ckpt")
    pools = MtcCreateTpuNodePoolsOperator(task_id="pools", target=local_target, slices=SLICES)
    ready >> enable >> bucket >> grant >> pools
