"""A hang after progress while the launch pool's only slot is taken (tests/e2e/test_next_in_trigger.py).

As in_try_no_slot.py, with a hang instead of a preemption: attempt 1 hangs at step 8 on both slices (SIGSTOP, after
persistent step 5), its trigger judges the stall after `stall_timeout`, deletes its JobSet, waits until its pods are
gone and creates attempt 2 (triggers.stall_end), while `hog` holds the pool's only slot.
"""

import datetime
import os
import time

from airflow.sdk import DAG, task

from mtc_provider.operators.jobset import MtcJobSetOperator

POOL = "mtc_e2e_one_slot"
RUN_NAME = "e2e-stall-in-trigger"
HOME = os.environ.get("MTC_LOCAL_HOME", "/nonexistent")
HOLD_S = 240  # the longest hog waits for attempt 2

with DAG(dag_id="stall_no_slot", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):
    MtcJobSetOperator(
        task_id="train", pool=POOL, priority_weight=10, weight_rule="absolute", deferrable=True,
        next_attempt_in_trigger=True, retries=1, target={"kind": "local", "home": HOME},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": RUN_NAME, "base_output_directory": f"{HOME}/e2e-stall-in-trigger-bucket",
                       "steps": 20, "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 2, "checkpoint_period": 5, "enable_autocheckpoint": True},
        workload={"jobset_name": "sit", "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": {"seed": 7, "step_time_ms": 300}, "max_restarts": 3,
                  "termination_grace_period_seconds": 5},
        poll_interval=1, progress_interval=0, pod_logs=False, stall_timeout=8, first_step_floor=60,
        fault_plan=[{"kind": "hang", "at_step": 8, "slice": 0}, {"kind": "hang", "at_step": 8, "slice": 1}])

    @task(pool=POOL, priority_weight=1, weight_rule="absolute")
    def hog():
        """Hold the pool's only slot until train's attempt 2 exists; when it was seen and when the slot was taken."""
        from mtc_provider.hooks.jobset import MtcJobSetHook

        took = time.time()
        hook = MtcJobSetHook(target={"kind": "local", "home": HOME})
        while time.time() - took < HOLD_S:
            names = [a.name for a in hook.find_by_run(RUN_NAME, "default")]
            second = [n for n in names if n.endswith("-a2")]
            if second:
                return {"took": took, "saw": second[0], "saw_at": time.time(), "before": names}
            time.sleep(0.5)
        return {"took": took, "saw": None, "saw_at": None, "before": names}

    hog()
