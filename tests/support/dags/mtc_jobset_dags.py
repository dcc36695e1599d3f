"""DAGs for tests/operators/jobset/test_js_operator_airflow.py, parsed by dag.test() from this bundle.

Paths come from MTC_TEST_JOBSET_HOME; the JobSet api is the in-memory one the test registers for "local".
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from mtc_provider.operators.jobset import MtcJobSetOperator

HOME = os.environ.get("MTC_TEST_JOBSET_HOME", "/tmp/mtc-jobset-tests")
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def make(dag_id: str, deferrable: bool, retries: int = 4, slices: dict | None = None, **extra) -> DAG:
    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        MtcJobSetOperator(
            task_id="train",
            slices=slices or {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
            checkpointing={"run_name": "llama", "base_output_directory": f"{HOME}/out", "steps": 100,
                           "checkpoint_period": 20},
            workload={"jobset_name": "train", "max_restarts": 2},
            target={"kind": "local", "home": f"{HOME}/home"},
            checkpoint_store_factory=lambda directory, conn_id: LocalCheckpointStore(),
            deferrable=deferrable,
            poll_interval=0,
            retries=retries,
            retry_delay=dt.timedelta(0),
            **extra,
        )
    return dag


retry_deferrable = make("mtc_retry_deferrable", True)
retry_sync = make("mtc_retry_sync", False)
dont_retry = make("mtc_dont_retry", True)
crash_loop = make("mtc_crash_loop", True)
bad_spec = make("mtc_bad_spec", True, retries=3, slices={"tpu_type": "v9", "topology": "2x2", "num_slices": 2})
reattach = make("mtc_reattach", False, retries=0)
keep_failed = make("mtc_keep_failed", True, keep_failed_attempts=1)


def make_sensor(dag_id: str, deferrable: bool) -> DAG:
    from mtc_provider.sensors.jobset import MtcJobSetSensor

    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        MtcJobSetSensor(task_id="wait", name="external", target={"kind": "local", "home": f"{HOME}/home"},
                        deferrable=deferrable, poll_interval=0, poke_interval=0.01, timeout=30)
    return dag


sensor_deferrable = make_sensor("mtc_sensor_deferrable", True)
sensor_poke = make_sensor("mtc_sensor_poke", False)

with DAG("mtc_cleanup", schedule=None, start_date=START, catchup=False) as cleanup:
    from mtc_provider.operators.jobset import MtcDeleteJobSetOperator

    MtcDeleteJobSetOperator(task_id="by_name", name="external", target={"kind": "local", "home": f"{HOME}/home"})
    MtcDeleteJobSetOperator(task_id="by_run", run_name="llama", launch_task_id="train",
                            target={"kind": "local", "home": f"{HOME}/home"})
