"""A DAG for the stall acceptance test (issue 5): the launch operator on the local target, real workload.

Slow steps (1.2 s of simulated accelerator time, a persistent checkpoint every 2 steps) and one `hang`
fault (SIGSTOP of slice 1) at step 40. The workload's own watchdog (`distributed_timeout_s`, which would exit
the stuck peer with 42 and restart the JobSet in the cluster) is set far above the stall timeout, so only the
launch trigger's stall detection can end the hung attempt. Paths come from MTC_LOCAL_HOME.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from mtc_provider.operators.jobset import MtcJobSetOperator

HOME = os.environ.get("MTC_LOCAL_HOME", "/tmp/mtc-acceptance-unset")
RUN_NAME = "acc-stall"
STEPS = 46
CHECKPOINT_PERIOD = 2
STEP_TIME_MS = 1200
# The first attempt runs longer than STALL_TIMEOUT before it hangs from its steps alone (40 x 1.2 s = 48 s > 45 s),
# whatever the start-up takes: at 32 steps (38.4 s) a quick start on a quiet CI machine hung it 43.9 s after its
# creation, below the stall timeout the test checks it outlived (CI, 2026-12-02).
HANG_AT = 40
# Above the checkpoint interval (~2.5 s) and JAX start-up under load: the stall clock runs from the pods' start, and
# start-up took 36-39 s at load 13 on the 2 shared cores (2026-12-02), which stalled both attempts at 30.
STALL_TIMEOUT = 45
POLL_INTERVAL = 2
WATCHDOG_S = 900

with DAG("mtc_acceptance_stall", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
         catchup=False) as dag:
    MtcJobSetOperator(
        task_id="train",
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": RUN_NAME, "base_output_directory": f"{HOME}/buckets", "steps": STEPS,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 1, "checkpoint_period": CHECKPOINT_PERIOD,
                       "enable_autocheckpoint": True},
        workload={"jobset_name": RUN_NAME, "image": "local",
                  "command": ["python", "-m", "mtc_local.workload"],
                  "extra_flags": {"seed": 7, "model_dim": 128, "global_batch_size": 16,
                                  "step_time_ms": STEP_TIME_MS, "distributed_timeout_s": WATCHDOG_S},
                  "max_restarts": 2, "termination_grace_period_seconds": 10},
        target={"kind": "local", "home": HOME},
        fault_plan=[{"kind": "hang", "at_step": HANG_AT, "slice": 1}],
        stall_timeout=STALL_TIMEOUT,
        poll_interval=POLL_INTERVAL,
        deferrable=False,
        retries=2,
        retry_delay=dt.timedelta(0),
    )
