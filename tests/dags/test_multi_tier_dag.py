"""Multi-tier mode through the sample training DAG, in real Airflow (dag.test on SQLite) on the local target.

In multi-tier mode MaxText writes no persistent checkpoint: the MTC replicator backs the local tier up to the
run's bucket folder instead (core.measure.progress.replicator_backup_dir). `train` ends on those backups; the
`checkpoint_progress` sensor must read them as well, or it waits its seven-day timeout for a persistent checkpoint
that never comes, holding a worker slot, with `goodput` and the teardown never run and (max_active_runs 1) the
DAG's next run unable to start.

Every task runs for real: the plan, the local readiness check, `train` deferred into the JobSet trigger (dag.test
runs triggers in-process), the sensor poking, goodput and the teardown. The workload is the light one (the only
local workload with a multi-tier mode: the JAX one refuses the flag), fault-free, so it saves only where MaxText
would in that mode: its local tier, which the runner's replicator backs up. The sensor's timeout is cut to a
minute so the run ends (failed) instead of waiting seven days when the sensor misses the backups.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_local.cluster.lifecycle import stop
from mtc_provider.core.measure.progress import REPLICATOR
from tests.support.training_dag import load_training_dag

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 20
CONF = {
    "checkpointing": {
        "run_name": "mt-dag", "steps": STEPS, "enable_emergency_checkpoint": False,
        "enable_multi_tier_checkpointing": True, "local_checkpoint_directory": "/local",
        "local_checkpoint_period": 2, "multi_tier_checkpointing_backup_interval_steps": 4,
        "enable_autocheckpoint": False,
    },
    "workload": {"namespace": "default", "image": "local", "maxtext_layout": "current", "max_restarts": 2,
                 "command": ["python", "-m", "mtc_local.light_workload"], "extra_flags": {"step_time_ms": 100}},
    "fault_plan": [],
}
SENSOR_TIMEOUT_S = 60


@pytest.fixture
def training_dag(monkeypatch, tmp_path, airflow_db):
    dag = load_training_dag(monkeypatch, tmp_path, "mtc_training_dag_multi_tier")
    dag.get_task("checkpoint_progress").timeout = SENSOR_TIMEOUT_S
    yield dag
    stop(tmp_path / "home")  # the local runner and its GCS, by the pids they recorded


def test_multi_tier_run_goes_through_the_sample_dag_to_goodput_and_teardown(training_dag, tmp_path, capfd):
    day = dt.datetime(2026, 4, 1, tzinfo=dt.timezone.utc)
    started = time.monotonic()
    run = training_dag.test(logical_date=day, run_after=day, run_conf=CONF)
    wall = time.monotonic() - started
    log = "".join(capfd.readouterr())
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert set(states) == {task.task_id for task in training_dag.tasks}, states
    assert all(state == "success" for state in states.values()), (states, log[-3000:])
    assert run.state == "success"

    plan = run.get_task_instance("plan").xcom_pull(task_ids="plan")
    bucket = tmp_path / "home" / "buckets" / plan["description"]["bucket"]["name"]
    assert not list(bucket.rglob("commit_success.txt")), "multi-tier mode wrote a persistent checkpoint"
    progress = run.get_task_instance("checkpoint_progress").xcom_pull(task_ids="checkpoint_progress")
    assert progress["source"] == REPLICATOR, progress
    assert progress["latest_step"] >= progress["target_step"] == plan["target_step"], progress
    assert f"new replicator backup: step {progress['latest_step']} under {bucket / 'mt-dag'}" in log
    deleted = run.get_task_instance("teardown").xcom_pull(task_ids="teardown")
    assert isinstance(deleted, list), deleted  # it ran (returned the JobSets it deleted), not skipped
    assert LocalCluster(str(tmp_path / "home")).list("default") == []  # nothing of the run is left
    goodput = run.get_task_instance("goodput").xcom_pull(task_ids="goodput")
    assert goodput["elapsed_s"] > 0 and goodput["last_productive_step"] == STEPS, goodput
    print(f"multi-tier DAG run: {wall:.0f}s, sensor {progress}")
