"""Resilient training: validate -> readiness gate -> launch with resubmission -> checkpoint progress -> goodput.

Each try of `train` is one attempt (a JobSet); a failed or preempted attempt is resubmitted by Airflow's
retries and resumes from the newest checkpoint. `teardown` removes the JobSet, never the checkpoints.
Trigger it with a form (target local or gke, slices, model size, the guide's eight checkpoint flags, steps,
a fault plan on the local target); the `plan` task validates everything before any side effect.

This file imports only Airflow's SDK and the provider's thin glue at parse time.
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Param, task

from mtc_provider.dag_support import planned
from mtc_provider.operators.gcp import MtcClusterReadinessOperator
from mtc_provider.operators.goodput import GoodputReportOperator
from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, MtcJobSetOperator
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor

DEFAULT_FAULT_PLAN = [
    {"kind": "sigkill_host", "at_step": 14, "slice": 0, "host": 0},  # a hardware failure
    {"kind": "wipe_ramdisk", "at_step": 34, "slice": 1, "host": 0},  # a replaced node: its local copy is gone
    {"kind": "sigterm_slice", "at_step": 52, "slice": 1},  # a preemption
]



with DAG(
    dag_id="mtc_resilient_training",
    description="Multi-slice training with emergency checkpointing, resubmitted until it reaches its target step",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["mtc", "training"],
    params={
        "target": Param("local", enum=["local", "gke"], description="Where the JobSet runs"),
        "project_id": Param("", type="string", description="GKE only"),
        "location": Param("", type="string", description="GKE only: the cluster's region or zone"),
        "cluster_name": Param("", type="string", description="GKE only"),
        "namespace": Param("default", type="string"),
        "bucket": Param("mtc-checkpoints", type="string", description="Checkpoint bucket (a directory locally)"),
        "tpu_type": Param("v6e", enum=["v4", "v5e", "v5p", "v6e"]),
        "topology": Param("2x2", type="string", description="Per slice, e.g. 2x2, 4x8 (v5e/v6e) or 2x2x2 (v4/v5p)"),
        "num_slices": Param(2, type="integer", minimum=2),
        "parameters": Param(1e6, type="number", minimum=1, description="Model parameters, for ramdisk sizing"),
        "run_name": Param("mtc-demo", type="string", description="Stable: a resubmitted run resumes from it"),
        "steps": Param(70, type="integer", minimum=1),
        "enable_checkpointing": Param(True, type="boolean"),
        "enable_emergency_checkpoint": Param(True, type="boolean"),
        "async_checkpointing": Param(True, type="boolean"),
        "local_checkpoint_directory": Param("/local", type="string"),
        "local_checkpoint_period": Param(4, type="integer", minimum=0),
        "checkpoint_period": Param(20, type="integer", minimum=1),
        "enable_single_replica_ckpt_restoring": Param(False, type="boolean"),
        "enable_autocheckpoint": Param(True, type="boolean"),
        "image": Param("local", type="string", description="Container image (ignored on the local target)"),
        "max_restarts": Param(2, type="integer", minimum=0, description="In-cluster restarts per attempt"),
        "stall_timeout": Param(120, type="integer", minimum=1, description="Seconds without a new checkpoint"),
        "step_time_ms": Param(150, type="integer", minimum=0, description="Local workload: extra time per step"),
        "distributed_timeout_s": Param(60, type="integer", minimum=1,
                                       description="Local workload: exit (retryable) when a peer is gone this long"),
        "fault_plan": Param(DEFAULT_FAULT_PLAN, type="array", description="Local target only: injected faults"),
        "customization": Param({}, type="object", description="GKE: Kueue queue and priority, spot or reservation, "
                               "volumes, env from Secrets/ConfigMaps, /dev/shm size, overrides (docs: xpk page)"),
    },
) as dag:

    @task
    def plan(params=None) -> dict:
        """Validate the whole run description before any side effect; hand the specs to the next tasks."""
        from mtc_provider.dag_support import plan_training_run

        return plan_training_run(params)

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
        customization=planned("customization"),
        stall_timeout="{{ params.stall_timeout }}",
        poll_interval=2.0,
        retries=6,
        retry_delay=datetime.timedelta(seconds=3),
        retry_exponential_backoff=2.0,
        max_retry_delay=datetime.timedelta(minutes=5),
    )

    progress = CheckpointProgressSensor(
        task_id="checkpoint_progress",
        checkpoint_dir=planned("checkpoint_dir"),
        target_step="{{ params.steps }}",
        stall_timeout="{{ params.stall_timeout }}",
        poll_interval=5,
    )

    goodput = GoodputReportOperator(
        task_id="goodput",
        checkpoint_dir=planned("checkpoint_dir"),
        events_dir=planned("events_dir"),
        attempts="{{ ti.xcom_pull(task_ids='train', key='attempts') }}",
        chart_path=planned("chart_path"),
    )

    teardown = MtcDeleteJobSetOperator(
        task_id="teardown",
        target=planned("target"),
        namespace=planned("namespace"),
        run_name="{{ params.run_name }}",
        launch_task_id="train",
    ).as_teardown(setups=train)

    plan_task >> readiness >> train >> progress >> goodput
    goodput >> teardown
