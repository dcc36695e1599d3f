"""DAGs for tests/operators/jobset/test_js_eval_completion.py: one-shot (wait_for="completion") JobSets.

Paths come from MTC_TEST_JOBSET_HOME; the JobSet api is the in-memory one the test registers for "local".
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from mtc_provider.operators.jobset import MtcJobSetOperator

HOME = os.environ.get("MTC_TEST_JOBSET_HOME", "/tmp/mtc-jobset-tests")
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def no_store(checkpoint_dir: str, gcp_conn_id: str):
    """Completion mode must never open a checkpoint store: opening one fails the task."""
    raise AssertionError(f"completion mode opened a checkpoint store for {checkpoint_dir}")


def make(dag_id: str, deferrable: bool, wait_for: str = "completion", retries: int = 3) -> DAG:
    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        MtcJobSetOperator(
            task_id="evaluate",
            slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
            checkpointing={"run_name": "llama-eval", "base_output_directory": f"{HOME}/out", "steps": 1,
                           "enable_checkpointing": False},
            workload={"jobset_name": "eval", "max_restarts": 1,
                      "command": ["python3", "-m", "maxtext.inference.decode", "src/maxtext/configs/base.yml"],
                      "extra_flags": {"load_parameters_path": f"{HOME}/out/llama/checkpoints/20/items"}},
            target={"kind": "local", "home": f"{HOME}/home"},
            checkpoint_store_factory=no_store,
            wait_for=wait_for,
            stall_timeout=1,  # ignored in completion mode: an evaluation writes no checkpoints
            deferrable=deferrable,
            poll_interval=0,
            retries=retries,
            retry_delay=dt.timedelta(0),
        )
    return dag


eval_deferrable = make("mtc_eval_deferrable", True)
eval_sync = make("mtc_eval_sync", False)
eval_bad_wait_for = make("mtc_eval_bad_wait_for", True, wait_for="finish")
