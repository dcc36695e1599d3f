"""Progress and pod logs during a run, in the real Airflow 3.3 triggerer against the real local cluster.

The supervisor (TriggerRunnerSupervisor) forks the real TriggerRunner, which runs JobSetTrigger on a task instance
parked in the deferred state. The trigger reads the leader pod's log through the local cluster's pod log endpoint,
streams it into its log (bounded: pod_logs_max_lines per read), takes the step from the workload's
`completed step` lines, and writes the `progress` XCom through the triggerer's comms (SetXCom, answered by the
supervisor's in-process execution API over this test's SQLite database). Run by test_js_live_progress.py in a
process of its own, like ownership_triggerer_cases.py (same reason).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time

import pytest

from tests.support.jobset_fixtures import load_bundle_dags
from tests.support.js_airflow_db import file_logger, make_dag_run
from tests.triggers.ownership_triggerer_cases import _Logs, _serve, _triggerer_job, local_home  # noqa: F401
from tests.support.local_cluster import FAKE_WORKLOAD, make_jobset

pytestmark = pytest.mark.timeout(480)
LOGICAL = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
NS, NAME, MAX_LINES = "default", "train-live-a1", 3


def _progress_xcom(run_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id="mtc_owner_deferred", run_id=run_id, task_id="train",
                                                 key="progress").one_or_none()
        if row is None:
            return None
        value = row.value
        return json.loads(value) if isinstance(value, (str, bytes)) else value


def _ti_state(run_id: str):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(TaskInstance).filter_by(dag_id="mtc_owner_deferred", run_id=run_id).one().state


def test_progress_xcom_moves_and_pod_logs_stream_during_the_run(monkeypatch, tmp_path, airflow_db, local_home,
                                                                 capfd):
    from airflow.jobs.triggerer_job_runner import TriggerRunnerSupervisor
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    from mtc_local.cluster.client import LocalCluster
    from mtc_local.target.cluster import running_kubeconfig
    from mtc_provider.core.attempt.launch_options import PodLogs, WatchSettings, WatchTimes
    from mtc_provider.triggers.jobset import JobSetTrigger

    load_bundle_dags(monkeypatch, tmp_path, "mtc_owner_dags.py")
    running_kubeconfig(local_home)
    cluster = LocalCluster(local_home)
    script = tmp_path / "fake_workload.py"
    script.write_text(FAKE_WORKLOAD)
    # About 10 lines a second per pod: more than MAX_LINES per 1 s read, so the bound has to cut.
    cluster.create(NS, make_jobset(NAME, script, args=["steps=100000", "sleep=0.1"], slices=1))
    connection = {"kind": "local", "home": str(local_home)}
    with create_session() as session:
        ti = make_dag_run(session, "mtc_owner_deferred", LOGICAL)
        trigger = Trigger.from_object(JobSetTrigger(
            connection=connection, namespace=NS, name=NAME,
            checkpoint_dir=str(tmp_path / "out" / "live" / "checkpoints"),
            watch=WatchSettings(times=WatchTimes(poll_interval=1.0, progress_interval=2.0),
                                pod_logs=PodLogs(enabled=True, interval=1.0, max_lines=MAX_LINES)),
            extra={"run_name": "live", "namespace": NS, "attempt": 1, "target_step": 100000}))
        session.add(trigger)
        session.flush()
        ti.state, ti.trigger_id = TaskInstanceState.DEFERRED, trigger.id
        session.merge(ti)
        session.commit()
        run_id, trigger_id = ti.run_id, trigger.id
    trigger_lines = tmp_path / "trigger.log"
    logger = file_logger(trigger_lines)
    monkeypatch.setattr(JobSetTrigger, "log", property(lambda self: logger))
    log_of = _Logs(capfd, trigger_lines)
    with create_session() as session:
        job = _triggerer_job(session)
        session.expunge_all()
    supervisor = TriggerRunnerSupervisor.start(job=job, capacity=10)
    try:
        _serve(supervisor, lambda: (_progress_xcom(run_id) or {}).get("source") == "workload-log", log=log_of)
        first = _progress_xcom(run_id)
        _serve(supervisor, lambda: (_progress_xcom(run_id) or {}).get("step", 0) > first["step"], timeout=60,
               log=log_of)
        second = _progress_xcom(run_id)
        assert _ti_state(run_id) == TaskInstanceState.DEFERRED  # the XCom moved while the task still waits
        _serve(supervisor, lambda: "lines left out" in trigger_lines.read_text(), timeout=60, log=log_of)
    finally:
        supervisor.kill(force=True)
    assert second["step"] > first["step"] >= 1 and second["updated_at"] > first["updated_at"]
    assert second["target_step"] == 100000 and second["steps_per_hour"] and second["eta_seconds"] > 0
    lines = trigger_lines.read_text().splitlines()
    pod_lines = [line for line in lines if re.match(r"\[train-live-a1-[\w-]+\] completed step: \d+", line)]
    assert pod_lines, "\n".join(lines[-40:])
    # The bound: between two other lines, never more than MAX_LINES of the pod's lines in a row.
    run, longest = 0, 0
    for line in lines:
        run = run + 1 if line in pod_lines else 0
        longest = max(longest, run)
    assert longest <= MAX_LINES, "\n".join(lines[-60:])
    assert any("lines left out (pod_logs_max_lines 3" in line for line in lines)
    assert any("step from the workload log" in line and "of 100000" in line for line in lines)
    with capfd.disabled():
        print(f"progress XCom during the run: step {first['step']} -> {second['step']}, "
              f"{second['steps_per_hour']} steps/h; {len(pod_lines)} pod lines streamed")
