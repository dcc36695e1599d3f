"""Cluster setup: every step of the guide's "Configure the GKE cluster" .. "Grant access" as idempotent tasks.

plan -> readiness (first: the version, Autopilot, Workload Identity on the TPU node pools; it fails before any
change unless a following task fixes what it finds, and logs what they will change) -> (opt-in) enable MTC ->
HNS bucket -> IAM bindings -> CheckpointConfiguration (-> TPU node pools, opt-in) -> readiness gate. Each task
changes nothing when the cluster is already set up, so the DAG can run before every training run. With target
`local` the same tasks check the local machine and report the steps that do not apply locally.
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Param, task

from mtc_provider.dag_support import CHECKPOINTING, CLUSTER, GKE_ONLY, MODEL, RUN, TARGET, planned
from mtc_provider.operators.gcp import (
    MtcApplyCheckpointConfigurationOperator,
    MtcClusterReadinessOperator,
    MtcCreateBucketOperator,
    MtcCreateTpuNodePoolsOperator,
    MtcEnableCheckpointingOperator,
    MtcGrantBucketAccessOperator,
)
from mtc_provider.sensors.gcp import MtcClusterReadinessSensor

# The Kubernetes service account the training pods run as (the DAG author's, never the form's): the bucket role
# is granted to it. mtc_resilient_training.py runs its pods as the same one (tests/dags checks they agree).
WORKLOAD_KSA = "default"

with DAG(
    dag_id="mtc_cluster_setup",
    description="Prepare a GKE cluster and bucket for Multi-Tier Checkpointing (idempotent)",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["mtc", "setup"],
    params={  # the trigger form, in sections (dag_support.FORM_SECTIONS)
        # Target
        "target": Param("local", enum=["local", "gke", "kubernetes"], title="Target", section=TARGET,
                        description="What to prepare: local (this machine: the steps are checked and the ones that "
                                    "do not apply are reported), gke, or kubernetes (any cluster with JobSet)"),
        "kubernetes_conn_id": Param("kubernetes_default", type="string", title="Kubernetes connection",
                                    section=TARGET,
                                    description="Kubernetes target only: the Airflow Kubernetes connection"),
        "namespace": Param("default", type="string", title="Namespace", section=TARGET,
                           description="The training namespace (its workload service account gets the bucket role)"),
        "bucket": Param("mtc-checkpoints", type="string", title="Checkpoint bucket", section=TARGET,
                        description="The HNS bucket to create (a directory under the local home on the local target)"),
        "bucket_location": Param("us-central1", type="string", title="Bucket location", section=TARGET,
                                 description="GKE and kubernetes: a region or multi-region, not a zone"),
        # GKE cluster
        "project_id": Param("", type="string", title="Project", section=CLUSTER,
                            description="GKE: the cluster's project (kubernetes target: the bucket's project)"),
        "location": Param("", type="string", title="Cluster location", section=CLUSTER,
                          description=f"{GKE_ONLY}: the cluster's region or zone"),
        "cluster_name": Param("", type="string", title="Cluster name", section=CLUSTER,
                              description=f"{GKE_ONLY}: the GKE cluster"),
        "tpu_zone": Param("", type="string", title="TPU zone", section=CLUSTER,
                          description=f"{GKE_ONLY}: the TPU node pools' zone (--node-locations); "
                                      "empty: the cluster's zone, required for a regional cluster"),
        "enable_mtc": Param(False, type="boolean", title="Enable Multi-Tier Checkpointing", section=CLUSTER,
                            description=f"{GKE_ONLY}, opt-in: change the cluster's addons"),
        "create_node_pools": Param(False, type="boolean", title="Create TPU node pools", section=CLUSTER,
                                   description=f"{GKE_ONLY}, opt-in: one TPU node pool per slice"),
        "node_pool_prefix": Param("mtc-slice", type="string", title="Node pool prefix", section=CLUSTER,
                                  description=f"{GKE_ONLY}: TPU node pools are <prefix>-<slice>"),
        # Model and slices
        "tpu_type": Param("v6e", enum=["v4", "v5e", "v5p", "v6e"], title="TPU type", section=MODEL,
                          description="The TPU generation of every slice"),
        "topology": Param(None, type=["null", "string"], title="Topology per slice", section=MODEL,
                          description="Per slice, e.g. 2x4, 4x8 (v5e/v6e) or 2x2x2 (v4/v5p); empty: the smallest the "
                                      "target takes (v6e: 2x2, one host; on gke 2x4, two hosts, "
                                      "as GKE Multislice needs multi-host slices)"),
        "machine_type": Param("", type="string", title="Machine type", section=MODEL,
                              description="TPU machine type (empty: the TPU type's default)"),
        "num_slices": Param(2, type="integer", minimum=2, title="Slices", section=MODEL,
                            description="Number of TPU slices"),
        "parameters": Param(1e6, type="number", minimum=1, title="Model parameters", section=MODEL,
                            description="Model parameters, for ramdisk sizing"),
        # Checkpointing
        "checkpoint_configuration_name": Param("mtc-checkpoint-config", type="string",
                                               title="CheckpointConfiguration name", section=CHECKPOINTING,
                                               description="The CheckpointConfiguration object to apply"),
        # Run
        "run_name": Param("mtc-demo", type="string", title="Run name", section=RUN,
                          description="The training run the setup is for (its names are checked here)"),
    },
) as dag:

    @task
    def plan(params=None, dag_run=None) -> dict:
        """Every name the setup will create or bind is validated here, before the first side effect."""
        from mtc_provider.dag_support import plan_cluster_setup

        return plan_cluster_setup(params, conf=getattr(dag_run, "conf", None), declared=dag.params.keys(),
                                  service_account=WORKLOAD_KSA)

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def opted_in(flag: str, params=None) -> bool:
        return bool(params[flag])

    plan_task = plan()
    # First, before any change: what no following task can fix fails here; the rest is logged as to change.
    readiness = MtcClusterReadinessOperator(
        task_id="readiness", target=planned("target"), slices=planned("slices"), sizing=planned("sizing"),
        fixed_by_later_tasks=planned("fixed_by_later_tasks"), retries=0,
    )
    enable = MtcEnableCheckpointingOperator(task_id="enable_mtc", target=planned("target"))
    bucket = MtcCreateBucketOperator(
        task_id="bucket", target=planned("target"), bucket_name="{{ params.bucket }}",
        bucket_location="{{ params.bucket_location }}", trigger_rule="none_failed",
    )
    grant = MtcGrantBucketAccessOperator(
        task_id="grant_bucket_access", target=planned("target"), bucket_name="{{ params.bucket }}",
        workload_namespace=planned("namespace"), workload_service_account=planned("service_account"),
    )
    config = MtcApplyCheckpointConfigurationOperator(
        task_id="checkpoint_configuration", target=planned("target"),
        name=planned("checkpoint_configuration_name"), bucket_name="{{ params.bucket }}",
        slices=planned("slices"), sizing=planned("sizing"),
    )
    pools = MtcCreateTpuNodePoolsOperator(task_id="node_pools", target=planned("target"), slices=planned("slices"),
                                          node_pool_prefix=planned("node_pool_prefix"),
                                          node_locations=planned("node_locations"))
    ready = MtcClusterReadinessSensor(
        task_id="ready", target=planned("target"), slices=planned("slices"), sizing=planned("sizing"),
        poke_interval=30, timeout=1800, trigger_rule="none_failed",
    )

    enable_gate = opted_in.override(task_id="enable_mtc_opted_in")("enable_mtc")
    pools_gate = opted_in.override(task_id="node_pools_opted_in")("create_node_pools")
    plan_task >> readiness >> enable_gate >> enable >> bucket
    readiness >> bucket >> grant >> config >> ready
    config >> pools_gate >> pools >> ready
