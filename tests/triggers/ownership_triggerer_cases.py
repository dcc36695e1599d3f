"""Who may delete a training JobSet from the triggerer: the real Airflow 3.3 triggerer, the real local API server.

Airflow 3.3's triggerer cancels a trigger that left its assignment with the user-action message, whether a user
acted or the trigger moved to another triggerer: TriggerRunnerSupervisor.update_triggers puts every running id
that `Trigger.ids_for_triggerer` no longer returns into `cancelling_triggers`, TriggerRunner.cancel_triggers
cancels it with `_USER_ACTION_CANCEL_MSG`, and run_trigger then awaits `on_kill()`
(apache/airflow airflow-core/src/airflow/jobs/triggerer_job_runner.py@3.3.2; the fix, PR #73454, is open).
A trigger moves when its triggerer's heartbeat is older than `triggerer_health_check_threshold`
(`Trigger.assign_unassigned`, airflow-core/src/airflow/models/trigger.py@3.3.2). Mark-failed sets the task
instance's state; `Trigger.clean_unused` then drops the trigger row, and the next `load_triggers` cancels it.

Here the supervisor runs its real subprocess (TriggerRunner), which runs JobSetTrigger against the local
cluster; its `on_kill` asks the task instance's state through the Task SDK (GetTaskStates, answered by the
supervisor's in-process execution API over this test's SQLite database).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest

from tests.support.jobset_fixtures import load_bundle_dags
from tests.support.js_airflow_db import file_logger, make_dag_run
from tests.support.local_cluster import FAKE_WORKLOAD, make_jobset, wait_for

pytestmark = pytest.mark.timeout(480)
LOGICAL = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
NS, NAME, RUN_NAME = "default", "train-owner-a1", "owner-run"


@pytest.fixture
def local_home(tmp_path, monkeypatch):
    """A local cluster home, started on demand by the adapter and stopped (by its recorded pid) afterwards."""
    from mtc_local.cluster.lifecycle import stop

    monkeypatch.setenv("MTC_RUNNER_IDLE_SECONDS", "60")
    home = tmp_path / "home"
    yield home
    stop(home)


def _deferred_task_instance(connection) -> tuple[str, int]:
    """A DAG run whose task instance is parked on a JobSetTrigger (try 1, deferred), as a deferral leaves it."""
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
    from mtc_provider.triggers.jobset import JobSetTrigger

    with create_session() as session:
        ti = make_dag_run(session, "mtc_owner_deferred", LOGICAL)
        trigger = Trigger.from_object(JobSetTrigger(
            connection=connection, namespace=NS, name=NAME, watch=WatchSettings(times=WatchTimes(poll_interval=1.0)),
            extra={"run_name": RUN_NAME, "namespace": NS, "attempt": 1}))
        session.add(trigger)
        session.flush()
        ti.state = TaskInstanceState.DEFERRED
        ti.trigger_id = trigger.id
        session.merge(ti)
        session.commit()
        return ti.run_id, trigger.id


def _triggerer_job(session):
    from airflow.jobs.job import Job
    from airflow.jobs.triggerer_job_runner import TriggererJobRunner

    job = Job(heartrate=1)
    TriggererJobRunner(job=job, capacity=10)  # sets job_type "TriggererJob", as `airflow triggerer` does
    job.state = "running"
    session.add(job)
    session.commit()
    return job


class _Logs:
    """What the trigger logged: its own log file (TriggerLoggingFactory writes `<ti log path>.trigger.<job id>.log`),
    plus what reached this process's output (where the forked runner's lines go once an earlier test in this
    session has configured logging differently)."""

    def __init__(self, capfd, own: Path) -> None:
        self.capfd, self.seen, self.own = capfd, [], own

    def __call__(self) -> str:
        from airflow.configuration import conf

        out = self.capfd.readouterr()
        self.seen += [out.out, out.err]
        folder = Path(conf.get("logging", "base_log_folder"))
        files = [p.read_text(errors="replace") for p in folder.rglob("*.trigger.*.log") if "mtc_owner_deferred" in str(p)]
        own = [self.own.read_text()] if self.own.exists() else []
        return "\n".join(files + self.seen + own)


def _serve(supervisor, until, timeout=180.0, log=None):
    """Run the supervisor's own loop (load_triggers, subprocess comms, events, clean_unused, heartbeat).

    Generous: in CI this runs 20 minutes into the suite on 2 busy cores, where the runner's fork and the trigger's
    first watch took over 60 s once (20 s on a quiet machine)."""
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() >= deadline:
            seen = log() if log else ""
            pytest.fail(f"the triggerer did not get there in {timeout:.0f} s (load {os.getloadavg()}); "
                        f"running {sorted(supervisor.running_triggers)}; log tail:\n{seen[-4000:]}")
        supervisor.run_once()


def _lock_exists(api, name) -> bool:
    from mtc_provider.adapters.protocols import NotFound

    try:
        api.get_lock(NS, name)
        return True
    except NotFound:
        return False


def test_triggerer_reassign_keeps_jobset_and_a_confirmed_mark_failed_deletes_it(
        monkeypatch, tmp_path, airflow_db, local_home, capfd):
    from airflow.jobs.triggerer_job_runner import TriggerRunnerSupervisor
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.sdk import timezone
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    from mtc_local.target.cluster import running_kubeconfig
    from mtc_provider.adapters.run_lock import RunLock
    from mtc_provider.core.basics import labels as L
    from mtc_local.cluster.client import LocalCluster
    from mtc_provider.triggers.jobset import JobSetTrigger

    load_bundle_dags(monkeypatch, tmp_path, "mtc_owner_dags.py")
    running_kubeconfig(local_home)
    cluster = LocalCluster(local_home)
    script = tmp_path / "fake_workload.py"
    script.write_text(FAKE_WORKLOAD)
    cluster.create(NS, make_jobset(NAME, script, args=["steps=100000", "sleep=0.5"], slices=1))
    connection = {"kind": "local", "home": str(local_home)}
    run_id, trigger_id = _deferred_task_instance(connection)
    lock = RunLock(cluster, NS, RUN_NAME, L.run_labels("mtc_owner_deferred", run_id, "train", RUN_NAME))
    lock.acquire()

    _log_of = _Logs(capfd, tmp_path / "trigger.log")
    with create_session() as session:
        job_a = _triggerer_job(session)
        job_b = _triggerer_job(session)
        session.expunge_all()
    trigger_lines = tmp_path / "trigger.log"  # JobSetTrigger's own lines, from the forked runner (file_logger)
    trigger_logger = file_logger(trigger_lines)
    monkeypatch.setattr(JobSetTrigger, "log", property(lambda self: trigger_logger))
    a = TriggerRunnerSupervisor.start(job=job_a, capacity=10)
    try:
        _serve(a, lambda: trigger_id in a.running_triggers and "starting" in _log_of(), log=_log_of)
        # Triggerer A misses heartbeats (a long GC pause, a stalled DB connection): B takes the trigger over.
        with create_session() as session:
            session.get(type(job_a), job_a.id).latest_heartbeat = timezone.utcnow() - dt.timedelta(minutes=5)
            session.get(type(job_b), job_b.id).latest_heartbeat = timezone.utcnow()
        Trigger.assign_unassigned(job_b.id, 10, 30)
        with create_session() as session:
            assert session.get(Trigger, trigger_id).triggerer_id == job_b.id
        started = time.monotonic()
        _serve(a, lambda: trigger_id not in a.running_triggers and trigger_id not in a.cancelling_triggers)
        reassigned_s = time.monotonic() - started
        _serve(a, lambda: f"JobSet {NS}/{NAME} kept" in _log_of(), timeout=60, log=_log_of)  # lines may trail the finish
        log = _log_of()
        assert cluster.get(NS, NAME)["metadata"].get("deletionTimestamp") is None  # still training
        assert "Trigger cancelled by user action, invoking on_kill" in log  # Airflow's own line: on_kill ran
        assert f"JobSet {NS}/{NAME} kept" in log and "still deferred" in log
        assert _lock_exists(cluster, lock.name)

        # The trigger comes back to A (B died); then a user marks the task failed in the UI.
        with create_session() as session:
            session.get(type(job_b), job_b.id).latest_heartbeat = timezone.utcnow() - dt.timedelta(minutes=5)
            session.get(type(job_a), job_a.id).latest_heartbeat = timezone.utcnow()
        _serve(a, lambda: trigger_id in a.running_triggers)
        time.sleep(1.5)  # let its watch start
        with create_session() as session:
            ti = session.query(TaskInstance).filter_by(dag_id="mtc_owner_deferred", run_id=run_id).one()
            ti.set_state(TaskInstanceState.FAILED, session=session)  # what "Mark failed" does
        _serve(a, lambda: trigger_id not in a.running_triggers and trigger_id not in a.cancelling_triggers)
        _serve(a, lambda: f"deleting JobSet {NS}/{NAME}" in _log_of(), timeout=60, log=_log_of)
        log = _log_of()
        assert f"deleting JobSet {NS}/{NAME} (checkpoints are kept)" in log and "was marked failed" in log
        wait_for(lambda: NAME not in [o["metadata"]["name"] for o in cluster.list(NS)]
                 or cluster.get(NS, NAME)["metadata"].get("deletionTimestamp"), timeout=30)
        # The run is over: its run name is freed. The trigger releases the lock after the delete answers (in a
        # thread beside the event loop), so it may trail the JobSet's deletion by a moment on a loaded machine.
        _serve(a, lambda: not _lock_exists(cluster, lock.name), timeout=60, log=_log_of)
        with capfd.disabled():
            print(f"reassignment handled in {reassigned_s:.1f}s")
    finally:
        a.kill(force=True)
