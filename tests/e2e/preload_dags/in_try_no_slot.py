"""A preemption after progress while the launch pool's only slot is taken (tests/e2e/test_next_in_trigger.py).

`train` and `hog` share a pool of one slot (the test creates it). `train` (higher priority) takes the slot first,
submits attempt 1 and defers, which frees the slot (the pool does not count deferred tasks); `hog` then takes it
and holds it until it sees `train`'s attempt 2, which only the triggerer can have created (`next_attempt_in_trigger`).
Attempt 1 is preempted at step 8 on both slices (the light workload saves and exits 0: the JobSet completes below
its target); `train` needs the slot back only for the try's end, after `hog` released it.
"""

import datetime
import os
import time

from airflow.sdk import DAG, task

from mtc_provider.operators.jobset import MtcJobSetOperator

POOL = "mtc_e2e_one_slot"
RUN_NAME = "e2e-next-in-trigger"
HOME = os.environ.get("MTC_LOCAL_HOME", "/nonexistent")
HOLD_S = 240  # the longest hog waits for attempt 2

with DAG(dag_id="in_try_no_slot", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):
    MtcJobSetOperator(
        task_id="train", pool=POOL, priority_weight=10, weight_rule="absolute", deferrable=True,
        next_attempt_in_trigger=True, retries=1, target={"kind": "local", "home": HOME},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": RUN_NAME, "base_output_directory": f"{HOME}/e2e-next-in-trigger-bucket",
                       "steps": 20, "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 2, "checkpoint_period": 5, "enable_autocheckpoint": True},
        workload={"jobset_name": "nit", "image": "local", "command": ["python3", "-m", "mtc_local.light_workload"],
                  "extra_flags": {"seed": 7, "step_time_ms": 300}, "max_restarts": 3,
                  "termination_grace_period_seconds": 15},
        poll_interval=1, progress_interval=0, pod_logs=False,
        fault_plan=[{"kind": "sigterm_slice", "at_step": 8, "slice": 0},
                    {"kind": "sigterm_slice", "at_step": 8, "slice": 1}])

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
