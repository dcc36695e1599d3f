"""A DAG for the run-life test (issue 27): the launch operator and its teardown on the local target, the light
workload, attempt 1 SIGKILLed (no in-cluster restart, so its JobSet fails; it made progress, so the same try submits attempt 2),
and keep_failed_attempts=1 on both: the failed attempt's JobSet stays beside the next one, and after the run, for
`mtc logs`. The bucket operator and the progress sensor are there for their OpenLineage events. Paths come from
MTC_LOCAL_HOME.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from mtc_provider.operators.gcp import MtcCreateBucketOperator
from mtc_provider.operators.jobset import MtcDeleteJobSetOperator, MtcJobSetOperator
from mtc_provider.sensors.checkpoint import CheckpointProgressSensor

HOME = os.environ.get("MTC_LOCAL_HOME", "/tmp/mtc-acceptance-unset")
RUN_NAME = "acc-runs"
BUCKET = "runs-bucket"
BASE = f"{HOME}/buckets/{BUCKET}"
STEPS = 24
KILL_AT = 6
TARGET = {"kind": "local", "home": HOME}

with DAG("mtc_acceptance_runs", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
         catchup=False) as dag:
    bucket = MtcCreateBucketOperator(task_id="bucket", bucket_name=BUCKET, target=TARGET)
    train = MtcJobSetOperator(
        task_id="train",
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": RUN_NAME, "base_output_directory": BASE, "steps": STEPS,
                       "enable_emergency_checkpoint": False, "checkpoint_period": 4},
        workload={"jobset_name": RUN_NAME, "image": "local",
                  "command": ["python", "-m", "mtc_local.light_workload"],
                  "extra_flags": {"step_time_ms": 100}, "max_restarts": 0,
                  "termination_grace_period_seconds": 5},
        target=TARGET,
        fault_plan=[{"kind": "sigkill_host", "at_step": KILL_AT, "slice": 0, "host": 0}],
        keep_failed_attempts=1,
        poll_interval=1,
        deferrable=False,
        retries=2,
        retry_delay=dt.timedelta(0),
    )
    progress = CheckpointProgressSensor(task_id="checkpoint_progress", checkpoint_dir=f"{BASE}/{RUN_NAME}/checkpoints",
                                        target_step=STEPS, poll_interval=1)
    teardown = MtcDeleteJobSetOperator(task_id="teardown", target=TARGET, run_name=RUN_NAME, launch_task_id="train",
                                       keep_failed_attempts=1).as_teardown(setups=train)
    bucket >> train >> progress >> teardown
