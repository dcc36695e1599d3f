"""Resilient training: validate -> readiness gate -> launch with resubmission -> checkpoint progress -> goodput.

Each try of `train` is one attempt (a JobSet); a failed or preempted attempt is resubmitted by Airflow's
retries and resumes from the newest checkpoint. `teardown` removes the JobSet, never the checkpoints.
Trigger it with a form (target local or gke, slices, model size, the guide's eight checkpoint flags, steps,
a fault plan on the local target); the `plan` task validates everything before any side effect. The goodput
task logs the checkpoint periods the advisor recommends; `remember_advice` stores them (Variable
`mtc_advice.<run_name>`) and the next run uses them when its `apply_advice` param is on.

This file imports only Airflow's SDK and the provider's thin glue at parse time.
"""

from __future__ import annotations

import datetime
import os

from airflow.sdk import DAG, Param, task

from mtc_provider.dag_support import (
    CHECKPOINTING,
    CLUSTER,
    GKE_ONLY,
    LOCAL_ONLY,
    MODEL,
    REHEARSAL,
    RUN,
    TARGET,
    planned,
)
from mtc_provider.operators.gcp import MtcClusterReadinessOperator
from mtc_provider.operators.goodput import GoodputReportOperator
from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, MtcJobSetOperator
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor

# The Kubernetes service account the training pods run as (the DAG author's, never the form's).
# mtc_cluster_setup.py grants the bucket role to the same one (tests/dags checks they agree).
WORKLOAD_KSA = "default"
DEFAULT_FAULT_PLAN = [
    {"kind": "sigkill_host", "at_step": 14, "slice": 0, "host": 0},  # a hardware failure
    {"kind": "wipe_ramdisk", "at_step": 34, "slice": 1, "host": 0},  # a replaced node: its local copy is gone
    {"kind": "sigterm_slice", "at_step": 52, "slice": 1},  # a preemption
]
STALL_TIMEOUT = "{{ params.stall_timeout or (120 if params.target == 'local' else 1800) }}"
PROGRESS_INTERVAL = "{{ 30 if params.target == 'local' else 300 }}"  # a progress line in the train task's log
# The launch task on a Celery queue of its own when the deployment runs a worker for it (docs/deployment.md,
# "Worker slots on the resubmission path"): a retry's start then never waits behind other tasks for a slot.
LAUNCH_QUEUE = {"queue": os.environ["MTC_LAUNCH_QUEUE"]} if os.environ.get("MTC_LAUNCH_QUEUE") else {}


# The trigger form, in sections (dag_support.FORM_SECTIONS). A dag_run.conf key that is not one of these is refused
# by the plan task.
PARAMS = {
    # Target
    "target": Param("local", enum=["local", "gke", "kubernetes"], title="Target", section=TARGET,
                    description="Where the JobSet runs: local (this machine), gke, or kubernetes (any cluster "
                                "with JobSet, by connection)"),
    "kubernetes_conn_id": Param("kubernetes_default", type="string", title="Kubernetes connection", section=TARGET,
                                description="Kubernetes target only: the Airflow Kubernetes connection"),
    "namespace": Param("default", type="string", title="Namespace", section=TARGET,
                       description="The JobSet's Kubernetes namespace"),
    "bucket": Param("mtc-checkpoints", type="string", title="Checkpoint bucket", section=TARGET,
                    description="Checkpoint bucket (a directory under the local home on the local target)"),
    # GKE cluster
    "project_id": Param("", type="string", title="Project", section=CLUSTER,
                        description="GKE: the cluster's project (kubernetes target: the bucket's project)"),
    "location": Param("", type="string", title="Cluster location", section=CLUSTER,
                      description=f"{GKE_ONLY}: the cluster's region or zone"),
    "cluster_name": Param("", type="string", title="Cluster name", section=CLUSTER,
                          description=f"{GKE_ONLY}: the GKE cluster"),
    "image": Param("local", type="string", title="Container image", section=CLUSTER,
                   description="The training image on gke and kubernetes (ignored on the local target)"),
    "maxtext_layout": Param("current", enum=["current", "pre-rename"], title="MaxText layout", section=CLUSTER,
                            description="GKE and kubernetes: the image's MaxText (current: 0.2.0 and later; "
                                        "ignored on the local target)"),
    "customization": Param({}, type="object", title="Customization", section=CLUSTER,
                           description="GKE and kubernetes: Kueue queue and priority, spot or reservation, volumes, "
                                       "env from Secrets/ConfigMaps, /dev/shm size, overrides (docs: xpk page)"),
    # Model and slices
    "tpu_type": Param("v6e", enum=["v4", "v5e", "v5p", "v6e"], title="TPU type", section=MODEL,
                      description="The TPU generation of every slice"),
    "topology": Param(None, type=["null", "string"], title="Topology per slice", section=MODEL,
                      description="Per slice, e.g. 2x4, 4x8 (v5e/v6e) or 2x2x2 (v4/v5p); empty: the smallest the "
                                  "target takes (v6e: 2x2, one host; on gke 2x4, two hosts, "
                                  "as GKE Multislice needs multi-host slices)"),
    "num_slices": Param(2, type="integer", minimum=2, title="Slices", section=MODEL,
                        description="Number of TPU slices"),
    "machine_type": Param("", type="string", title="Machine type", section=MODEL,
                          description="TPU machine type (empty: the TPU type's default)"),
    "parameters": Param(1e6, type="number", minimum=1, title="Model parameters", section=MODEL,
                        description="Model parameters, for ramdisk sizing"),
    "model_flags": Param({}, type="object", title="Model flags", section=MODEL,
                         description="More MaxText flags (GKE), e.g. {\"model_name\": \"llama2-7b\"}; "
                                     "locally model_dim, global_batch_size, learning_rate"),
    # Checkpointing: the guide's flags
    "enable_checkpointing": Param(True, type="boolean", title="Checkpointing", section=CHECKPOINTING,
                                  description="MaxText enable_checkpointing"),
    "enable_emergency_checkpoint": Param(True, type="boolean", title="Emergency checkpointing", section=CHECKPOINTING,
                                         description="Orbax's emergency checkpointing: a local (ramdisk) tier "
                                                     "beside the persistent one"),
    "async_checkpointing": Param(True, type="boolean", title="Asynchronous checkpointing", section=CHECKPOINTING,
                                 description="Save while training goes on"),
    "local_checkpoint_directory": Param("/local", type="string", title="Local checkpoint directory",
                                        section=CHECKPOINTING, description="The ramdisk's mount path in the pod"),
    "local_checkpoint_period": Param(4, type="integer", minimum=0, title="Local checkpoint period",
                                     section=CHECKPOINTING, description="Steps between local (ramdisk) checkpoints"),
    "checkpoint_period": Param(20, type="integer", minimum=1, title="Persistent checkpoint period",
                               section=CHECKPOINTING, description="Steps between checkpoints in the bucket"),
    "enable_single_replica_ckpt_restoring": Param(False, type="boolean", title="Single-replica restore",
                                                  section=CHECKPOINTING,
                                                  description="One replica reads, then broadcasts to the others"),
    "enable_autocheckpoint": Param(True, type="boolean", title="Checkpoint on preemption", section=CHECKPOINTING,
                                   description="Save at the preemption step after SIGTERM"),
    "enable_multi_tier_checkpointing": Param(False, type="boolean", title="Multi-tier checkpointing (MaxText)",
                                             section=CHECKPOINTING,
                                             description=f"{GKE_ONLY}: MaxText's multi-tier mode (docs/maxtext.md)"),
    "multi_tier_checkpointing_backup_interval_minutes": Param(
        None, type=["null", "integer"], minimum=1, title="Multi-tier backup interval (minutes)", section=CHECKPOINTING,
        description=f"{GKE_ONLY}: with multi-tier checkpointing; exactly one of minutes and steps"),
    "multi_tier_checkpointing_backup_interval_steps": Param(
        None, type=["null", "integer"], minimum=1, title="Multi-tier backup interval (steps)", section=CHECKPOINTING,
        description=f"{GKE_ONLY}: with multi-tier checkpointing; exactly one of minutes and steps"),
    "use_replicator_service": Param(False, type="boolean", title="Replicator service", section=CHECKPOINTING,
                                    description=f"{GKE_ONLY}: with multi-tier checkpointing (docs/maxtext.md)"),
    "apply_advice": Param(False, type="boolean", title="Apply the last advice", section=CHECKPOINTING,
                          description="Use the checkpoint periods advised after the last run of this run_name "
                                      "(Airflow Variable mtc_advice.<run_name>) instead of the two above"),
    # Run and resubmission
    "run_name": Param("mtc-demo", type="string", title="Run name", section=RUN,
                      description="Stable: a resubmitted run resumes from it"),
    "steps": Param(70, type="integer", minimum=1, title="Steps", section=RUN, description="The target step count"),
    "max_restarts": Param(2, type="integer", minimum=0, title="In-cluster restarts", section=RUN,
                          description="In-cluster restarts per attempt (JobSet failurePolicy.maxRestarts)"),
    "stall_timeout": Param(None, type=["null", "integer"], minimum=1, title="Stall timeout (s)", section=RUN,
                           description="Seconds without a new checkpoint before an attempt is resubmitted; "
                                       "empty: 120 locally, 1800 on GKE (compilation and restore take minutes)"),
    "termination_grace_period_seconds": Param(None, type=["null", "integer"], minimum=1,
                                              title="Termination grace period (s)", section=RUN,
                                              description="Seconds between SIGTERM and SIGKILL (default 60 locally, "
                                                          "300 on GKE)"),
    "poll_interval": Param(None, type=["null", "number"], minimum=1, title="Poll interval (s)", section=RUN,
                           description="Seconds between JobSet status checks; empty: 2 locally, 30 on GKE"),
    # Rehearsal (local target only)
    "step_time_ms": Param(150, type="integer", minimum=0, title="Extra step time (ms)", section=REHEARSAL,
                          description=f"{LOCAL_ONLY}: extra time per step of the local workload"),
    "local_workload": Param("full", enum=["full", "light"], title="Local workload", section=REHEARSAL,
                            description=f"{LOCAL_ONLY}: the JAX workload, or the light one (no JAX, load tests only)"),
    "distributed_timeout_s": Param(60, type="integer", minimum=1, title="Peer timeout (s)", section=REHEARSAL,
                                   description=f"{LOCAL_ONLY}: the workload exits (retryable) when a peer is gone "
                                               "this long"),
    "fault_plan": Param(DEFAULT_FAULT_PLAN, type="array", title="Fault plan", section=REHEARSAL,
                        description=f"{LOCAL_ONLY}: injected faults (docs: local target)"),
}


with DAG(
    dag_id="mtc_resilient_training",
    description="Multi-slice training with emergency checkpointing, resubmitted until it reaches its target step",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["mtc", "training"],
    params=PARAMS,
) as dag:

    @task
    def plan(params=None, dag_run=None) -> dict:
        """Validate the whole run description before any side effect; hand the specs to the next tasks."""
        from mtc_provider.dag_support import plan_training_run

        if params and params.get("apply_advice"):
            from airflow.sdk import Variable

            from mtc_provider.core.advisor import VARIABLE_PREFIX, apply_advice
            from mtc_provider.core.errors import SpecError

            stored = Variable.get(VARIABLE_PREFIX + str(params.get("run_name")), default=None, deserialize_json=True)
            try:
                params, said = apply_advice(params, stored)
            except SpecError as err:  # a hand-edited Variable: say which value, keep the periods as given
                said = f"apply_advice: stored advice ignored: {err}"
            print(said)
        # The connection and the service account are the DAG author's: set them here, never in the form.
        return plan_training_run(params, conf=getattr(dag_run, "conf", None), declared=PARAMS,
                                 gcp_conn_id="google_cloud_default", service_account=WORKLOAD_KSA)

    plan_task = plan()

    readiness = MtcClusterReadinessOperator(
        task_id="readiness",
        target=planned("target"),
        slices=planned("slices"),
        sizing=planned("sizing"),
        retries=0,
    )

    train = MtcJobSetOperator(
        task_id="train",
        target=planned("target"),
        slices=planned("slices"),
        checkpointing=planned("checkpointing"),
        workload=planned("workload"),
        fault_plan=planned("fault_plan"),
        target_step=planned("target_step"),
        customization=planned("customization"),
        # Scaled with the target: seconds locally, minutes on GKE. Deferrable: a worker's restart (a deploy, a
        # scale-down) never touches the JobSet, and no worker slot is held for hours.
        stall_timeout=STALL_TIMEOUT,
        poll_interval=planned("poll_interval"),
        progress_interval=PROGRESS_INTERVAL,
        deferrable=True,
        retries=6,
        retry_delay=datetime.timedelta(seconds=3),
        retry_exponential_backoff=2.0,
        max_retry_delay=datetime.timedelta(minutes=5),
        **LAUNCH_QUEUE,
    )

    progress = CheckpointProgressSensor(
        task_id="checkpoint_progress",
        checkpoint_dir=planned("checkpoint_dir"),
        target_step=planned("target_step"),
        stall_timeout=STALL_TIMEOUT,
        poll_interval=5,
    )

    goodput = GoodputReportOperator(
        task_id="goodput",
        checkpoint_dir=planned("checkpoint_dir"),
        events_dir=planned("events_dir"),
        attempts_task_id="train",  # one record per attempt, pushed by the launch operator
        chart_path=planned("chart_path"),
    )

    teardown = MtcDeleteJobSetOperator(
        task_id="teardown",
        target=planned("target"),
        namespace=planned("namespace"),
        run_name="{{ params.run_name }}",
        launch_task_id="train",
    ).as_teardown(setups=train)

    @task
    def remember_advice(report: dict | None = None, params=None) -> dict | None:
        """Store the goodput task's checkpoint advice for the next run of this run_name (see apply_advice)."""
        advice = (report or {}).get("advice") or {}
        if not advice.get("advice"):
            return None
        from airflow.sdk import Variable

        from mtc_provider.core.advisor import VARIABLE_PREFIX

        stored = {"advice": advice["advice"], "line": advice["line"]}
        Variable.set(VARIABLE_PREFIX + str(params["run_name"]), stored, serialize_json=True)
        return stored

    plan_task >> readiness >> train >> progress >> goodput
    goodput >> teardown
    remember_advice(goodput.output)
