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
    REHEARSAL,
    RUN,
    TARGET,
    form_params,
    planned,
    target_param,
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
PROGRESS_INTERVAL = "{{ 30 if params.target == 'local' else 300 }}"  # a progress line in the train task's log
OBJECT = ["null", "object"]
PLANNED_RUN_NAME = "{{ ti.xcom_pull(task_ids='plan')['checkpointing']['run_name'] }}"
# The launch task in a pool of its own, and on a Celery queue of its own, when the deployment has them
# (docker-compose.yaml sets MTC_LAUNCH_POOL; docs/deployment.md, "Worker slots on the resubmission path"): a
# retry's start then never waits behind other runs' tasks for a slot. Unset: Airflow's default pool and queue.
LAUNCH_SLOTS = {field: os.environ[variable] for field, variable in (("pool", "MTC_LAUNCH_POOL"),
                                                                   ("queue", "MTC_LAUNCH_QUEUE"))
                if os.environ.get(variable)}

# The trigger form: the run description's sections, one to one with the `mtc` YAML (examples/*.yaml; core.definition.description.run).
# `mtc plan FILE` and this DAG's plan task validate it with the same function; `mtc run FILE` triggers this DAG with
# the file's description. A dag_run.conf key that is not one of these is refused; a conf section is laid over the
# form's section field by field. Empty values are the target's (its kind's rules, core.basics.kind_rules).
PARAMS = {
    "target": target_param("Where the JobSet runs: local (this machine), gke, or kubernetes (any cluster "
                           "with JobSet, by connection)"),
    **form_params("kubernetes_conn_id"),
    "bucket": Param({"name": "mtc-checkpoints", "location": "us-central1"}, type="object", title="Bucket",
                    section=TARGET, description="{name, location}: the checkpoint bucket (a directory under the "
                                                "local home on the local target)"),
    "cluster": Param(None, type=OBJECT, title="Cluster", section=CLUSTER,
                     description=f"{GKE_ONLY}: {{project_id, location, name}} (kubernetes target: the project of "
                                 "the IAM principals, optional)"),
    "customization": Param({}, type="object", title="Customization", section=CLUSTER,
                           description="GKE and kubernetes: Kueue queue and priority, spot or reservation, volumes, "
                                       "env from Secrets/ConfigMaps, /dev/shm size, overrides (docs: xpk page)"),
    "checkpoint_configuration_name": Param("mtc-checkpoint-config", type="string", title="CheckpointConfiguration",
                                           section=CLUSTER,
                                           description="GKE and kubernetes: the CheckpointConfiguration of the "
                                                       "slices' nodes (the cluster-setup DAG applies it)"),
    **form_params("slices", "sizing"),
    "checkpointing": Param({
        "run_name": "mtc-demo", "steps": 70, "enable_checkpointing": True, "enable_emergency_checkpoint": True,
        "async_checkpointing": True, "local_checkpoint_directory": "/local", "local_checkpoint_period": 4,
        "checkpoint_period": 20, "enable_single_replica_ckpt_restoring": False, "enable_autocheckpoint": True,
    }, type="object", title="Checkpointing", section=CHECKPOINTING,
        description="MaxText's checkpointing flags (the guide's table), run_name (stable: a resubmitted run "
                    "resumes from it) and steps; base_output_directory empty: the bucket's"),
    "apply_advice": Param(False, type="boolean", title="Apply the last advice", section=CHECKPOINTING,
                          description="Use the checkpoint periods advised after the last run of this run_name "
                                      "(Airflow Variable mtc_advice.<run_name>) instead of the ones above"),
    "workload": Param({"namespace": "default", "image": "local", "maxtext_layout": "current", "max_restarts": 2,
                       "extra_flags": {"step_time_ms": 150}}, type="object", title="Workload", section=RUN,
                      description="{namespace, image (gke and kubernetes), maxtext_layout, extra_flags (MaxText "
                                  "flags; locally model_dim, global_batch_size, learning_rate, step_time_ms, seed, "
                                  "distributed_timeout_s), max_restarts (in-cluster restarts per attempt), "
                                  "termination_grace_period_seconds, command (locally the light workload)}"),
    "poll_interval": Param(None, type=["null", "number"], minimum=1, title="Poll interval (s)", section=RUN,
                           description="Seconds between JobSet status checks; empty: 2 locally, 30 on GKE"),
    "stall_timeout": Param(None, type=["null", "integer"], minimum=1, title="Stall timeout (s)", section=RUN,
                           description="Seconds without progress (a step the leader logs, a replicator backup or "
                                       "a checkpoint) before an attempt is resubmitted; empty: derived from the "
                                       "run's cadence, at least 120 locally, 1800 on GKE (docs/resubmission.md)"),
    "step_seconds": Param(None, type=["null", "number"], exclusiveMinimum=0, title="Step time (s)", section=RUN,
                          description="Expected seconds per training step (e.g. from MaxText's published throughput);"
                                      " turns checkpoint periods into seconds for the stall limit; empty: measured "
                                      "from the steps the run reports"),
    "startup_timeout": Param(None, type=["null", "integer"], minimum=1, title="Startup timeout (s)", section=RUN,
                             description="Seconds one start of the pods may take before the attempt is given up "
                                         "(pods stuck in ContainerCreating or unscheduled); empty: derived from the "
                                         "run (image pull + nodes + ramdisk mount: 1804 s for 2 slices on GKE, "
                                         "960 s locally; docs/troubleshooting.md)"),
    "pod_logs": Param(True, type="boolean", title="Live pod logs", section=RUN,
                      description="Stream the leader pod's log into the train task's log while it waits "
                                  "(bounded: 100 lines and 32 KiB per read)"),
    "pod_logs_interval": Param(30, type="number", minimum=1, title="Pod log interval (s)", section=RUN,
                               description="Seconds between reads of the leader pod's log"),
    "keep_failed_attempts": Param(0, type="integer", minimum=0, title="Keep failed attempts", section=RUN,
                                  description="How many of the newest failed attempts' JobSets stay in the cluster "
                                              "while the run goes on, to debug them (mtc logs RUN --attempt N); "
                                              "the teardown deletes them"),
    "fault_plan": Param(DEFAULT_FAULT_PLAN, type="array", title="Fault plan", section=REHEARSAL,
                        description=f"{LOCAL_ONLY}: injected faults (docs: local target); empty elsewhere"),
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
        from mtc_provider.dag_support import plan_training_run, trigger_form

        conf = getattr(dag_run, "conf", None)
        form = trigger_form(PARAMS, conf)  # the form's sections with the trigger's laid over them field by field
        if form.get("apply_advice"):
            from airflow.sdk import Variable

            from mtc_provider.core.view.advisor import VARIABLE_PREFIX, apply_advice
            from mtc_provider.core.basics.errors import SpecError

            run_name = (form.get("checkpointing") or {}).get("run_name")
            stored = Variable.get(VARIABLE_PREFIX + str(run_name), default=None, deserialize_json=True)
            try:
                form, said = apply_advice(form, stored)
            except SpecError as err:  # a hand-edited Variable: say which value, keep the periods as given
                said = f"apply_advice: stored advice ignored: {err}"
            print(said)
        # The connection and the service account are the DAG author's: set them here, never in the form.
        return plan_training_run(form, conf=conf, declared=PARAMS, gcp_conn_id="google_cloud_default",
                                 service_account=WORKLOAD_KSA)

    plan_task = plan()

    readiness = MtcClusterReadinessOperator(
        task_id="readiness",
        target=planned("target"),
        slices=planned("slices"),
        sizing=planned("sizing"),
        # The CheckpointConfiguration must serve this run: nodeSelector = the slices' machine type, its bucket the
        # run's, inMemoryVolumeSize >= the run's ramdisk (core.definition.cluster.configuration_match; not checked on the local target).
        checkpoint_configuration_name="{{ ti.xcom_pull(task_ids='plan')['description']['checkpoint_configuration_name'] }}",
        bucket_name="{{ (ti.xcom_pull(task_ids='plan')['description']['bucket'] or {}).get('name') }}",
        # Spot or reservation runs need node pools of that capacity (core.definition.shape.capacity; checked on GKE).
        capacity="{{ ti.xcom_pull(task_ids='plan')['customization']['capacity'] }}",
        reservation="{{ ti.xcom_pull(task_ids='plan')['customization']['reservation'] }}",
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
        stall_timeout=planned("stall_timeout"),
        startup_timeout=planned("startup_timeout"),  # bounded by default (core.definition.cluster.startup)
        stall_cadence=planned("stall_cadence"),  # derived from the run's cadence unless the form gave a value
        poll_interval=planned("poll_interval"),
        progress_interval=PROGRESS_INTERVAL,
        keep_failed_attempts=planned("keep_failed_attempts"),
        pod_logs=planned("pod_logs"),
        pod_logs_interval=planned("pod_logs_interval"),
        deferrable=True,
        retries=6,
        retry_delay=datetime.timedelta(seconds=3),
        retry_exponential_backoff=2.0,
        max_retry_delay=datetime.timedelta(minutes=5),
        **LAUNCH_SLOTS,
    )

    progress = CheckpointProgressSensor(
        task_id="checkpoint_progress",
        checkpoint_dir=planned("checkpoint_dir"),
        target_step=planned("target_step"),
        stall_timeout=planned("checkpoint_stall_timeout"),  # measured against persistent saves only
        poll_interval=5,
        # Multi-tier mode writes no persistent checkpoint: the replicator's backups complete on every node count.
        checkpointing=planned("checkpointing"),
        slices=planned("slices"),
    )

    goodput = GoodputReportOperator(
        task_id="goodput",
        checkpoint_dir=planned("checkpoint_dir"),
        checkpointing=planned("checkpointing"),
        slices=planned("slices"),
        events_dir=planned("events_dir"),
        attempts_task_id="train",  # one record per attempt, pushed by the launch operator
        chart_path=planned("chart_path"),
    )

    # `plan` is a setup too: Airflow runs a teardown when at least one of its setups succeeded
    # (ALL_DONE_SETUP_SUCCESS), so a failed `train` is still followed by the teardown, which deletes what is left
    # of the run (unless `train` kept it for the orchestrator's own trouble: jobset_kept). A failed plan launched
    # nothing: the teardown is then upstream_failed and touches no cluster.
    teardown = MtcDeleteJobSetOperator(
        task_id="teardown",
        target=planned("target"),
        namespace=planned("namespace"),
        run_name=PLANNED_RUN_NAME,
        launch_task_id="train",
    ).as_teardown(setups=[plan_task.operator, train])

    @task
    def remember_advice(report: dict | None = None, run_name: str | None = None) -> dict | None:
        """Store the goodput task's checkpoint advice for the next run of this run_name (see apply_advice)."""
        advice = (report or {}).get("advice") or {}
        if not advice.get("advice"):
            return None
        from airflow.sdk import Variable

        from mtc_provider.core.view.advisor import VARIABLE_PREFIX

        stored = {"advice": advice["advice"], "line": advice["line"]}
        Variable.set(VARIABLE_PREFIX + str(run_name), stored, serialize_json=True)
        return stored

    plan_task >> readiness >> train >> progress >> goodput
    goodput >> teardown
    remember_advice(goodput.output, PLANNED_RUN_NAME)
