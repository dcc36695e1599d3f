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

from mtc_provider.dag_support import (CHECKPOINTING, CLUSTER, GKE_ONLY, RUN, TARGET, form_params, planned,
                                      target_param)
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
OBJECT = ["null", "object"]

# The trigger form: the run description's sections (as in mtc_resilient_training.py and the `mtc` YAML; core.definition.description.run),
# plus the setup's switches (core.definition.description.params.SETUP_SWITCHES). The plan task validates them all with one function
# (core.definition.description.params.cluster_setup_run). A dag_run.conf key that is not one of these is refused; a conf section is laid
# over the form's section field by field.
PARAMS = {
    "target": target_param("What to prepare: local (this machine: the steps are checked and the ones that do "
                           "not apply are reported), gke, or kubernetes (any cluster with JobSet)"),
    **form_params("kubernetes_conn_id"),
    "bucket": Param({"name": "mtc-checkpoints", "location": "us-central1"}, type="object", title="Bucket",
                    section=TARGET, description="{name, location}: the HNS bucket to create, in a region or "
                                                "multi-region, not a zone (a directory under the local home on the "
                                                "local target)"),
    "cluster": Param(None, type=OBJECT, title="Cluster", section=CLUSTER,
                     description=f"{GKE_ONLY}: {{project_id, location, name, node_locations}}; node_locations: the "
                                 "TPU node pools' zones (--node-locations), empty: a zonal cluster's own zone, "
                                 "required for a regional cluster (kubernetes target: the bucket's project, optional)"),
    "checkpoint_configuration_name": Param("mtc-checkpoint-config", type="string", title="CheckpointConfiguration",
                                           section=CLUSTER, description="GKE and kubernetes: the "
                                                                        "CheckpointConfiguration object to apply"),
    "enable_mtc": Param(False, type="boolean", title="Enable Multi-Tier Checkpointing", section=CLUSTER,
                        description=f"{GKE_ONLY}, opt-in: change the cluster's addons"),
    "create_node_pools": Param(False, type="boolean", title="Create TPU node pools", section=CLUSTER,
                               description=f"{GKE_ONLY}, opt-in: one TPU node pool per slice"),
    # GKE node pool names (core.basics.names.check_node_pool_prefix, which the plan applies too).
    "node_pool_prefix": Param("mtc-slice", type="string", title="Node pool prefix", section=CLUSTER,
                              pattern="^[a-z]([-a-z0-9]*[a-z0-9])?$", maxLength=36,
                              description=f"{GKE_ONLY}: TPU node pools are <prefix>-<slice>; lower-case letters, "
                                          "digits and '-', starting with a letter, at most 36"),
    **form_params("slices", "sizing"),
    "checkpointing": Param({"run_name": "mtc-demo"}, type="object", title="Checkpointing", section=CHECKPOINTING,
                           description="{run_name}: the training run the setup is for (its names are checked here)"),
    "workload": Param({"namespace": "default"}, type="object", title="Workload", section=RUN,
                      description="{namespace}: the training namespace (its workload service account gets the "
                                  "bucket role)"),
}

with DAG(
    dag_id="mtc_cluster_setup",
    description="Prepare a GKE cluster and bucket for Multi-Tier Checkpointing (idempotent)",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["mtc", "setup"],
    params=PARAMS,
) as dag:

    @task
    def plan(params=None, dag_run=None) -> dict:
        """Every name the setup will create or bind is validated here, before the first side effect."""
        from mtc_provider.dag_support import plan_cluster_setup, trigger_form

        conf = getattr(dag_run, "conf", None)
        return plan_cluster_setup(trigger_form(PARAMS, conf), conf=conf, declared=PARAMS,
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
        task_id="bucket", target=planned("target"), bucket_name=planned("bucket_name"),
        bucket_location=planned("bucket_location"), trigger_rule="none_failed",
    )
    grant = MtcGrantBucketAccessOperator(
        task_id="grant_bucket_access", target=planned("target"), bucket_name=planned("bucket_name"),
        workload_namespace=planned("namespace"), workload_service_account=planned("service_account"),
    )
    config = MtcApplyCheckpointConfigurationOperator(
        task_id="checkpoint_configuration", target=planned("target"),
        name=planned("checkpoint_configuration_name"), bucket_name=planned("bucket_name"),
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
