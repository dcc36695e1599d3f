"""The run lock records its owner and is taken over only when Airflow proves that owner gone; real Airflow.

The launch runs in `dag.test()` on this session's SQLite database; its owner check asks the state of the owner's
task instance through the Task SDK (`RuntimeTaskInstance.get_task_states` -> GetTaskStates -> the in-process
execution API, `GET /execution/task-instances/states`, apache/airflow
airflow-core/src/airflow/api_fastapi/execution_api/routes/task_instances.py@3.3.2). The owners' DAG runs are rows
left in the state a user's action leaves them: "Mark failed"/"Mark success" set the task instance's state,
"Clear" sets it to None (airflow-core/src/airflow/models/taskinstance.py@3.3.2 `clear_task_instances`), deleting
a DAG run deletes its task instances with it.
"""

from __future__ import annotations

import contextlib
import json

import datetime as dt

import pytest

from tests.support.js_helpers import reach as _reach
from tests.doubles.memory_jobset import MemoryJobSetApi, status_completed, status_running
from tests.support.jobset_fixtures import load_bundle_dags
from tests.support.js_airflow_db import enable_provider_loggers, file_logger, make_dag_run

@pytest.fixture(autouse=True)
def _provider_loggers():
    enable_provider_loggers()


pytestmark = pytest.mark.timeout(300)
DAG_ID, RUN_NAME, NS = "mtc_retry_deferrable", "llama", "default"


@pytest.fixture
def dags(monkeypatch, tmp_path, airflow_db):
    return load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")


def _day(n: int) -> dt.datetime:
    return dt.datetime(2026, 3, n, tzinfo=dt.timezone.utc)


def _held_by_a_run_left(cluster, day: int, state, delete_run: bool = False):
    """A lock on `llama` written by a launch of another DAG run, whose task instance is now in `state`."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from mtc_provider.adapters.run_lock import RunLock
    from mtc_provider.core.basics import labels as L

    with create_session() as session:
        ti = make_dag_run(session, DAG_ID, _day(day), state=state)
        run_id = ti.run_id
        owner = {"dag_id": DAG_ID, "run_id": run_id, "task_id": "train", "map_index": -1, "try_number": 1}
        lock = RunLock(MemoryJobSetApi(cluster), NS, RUN_NAME, L.run_labels(DAG_ID, run_id, "train", RUN_NAME),
                       owner)
        lock.acquire()
        if delete_run:  # "Delete Dag Run": its task instances go with it
            session.delete(session.query(DagRun).filter_by(dag_id=DAG_ID, run_id=run_id).one())
            session.commit()
    return lock


def _run_new(dags, day: int):
    dr = dags.retry_deferrable.test(logical_date=_day(day), run_after=_day(day))
    return dr, dr.get_task_instance("train")


@pytest.mark.parametrize("state, day", [("failed", 1), ("success", 3)], ids=["mark_failed", "mark_success"])
def test_stale_lock_after_a_deferred_mark_is_taken_over(dags, tmp_path, cluster, monkeypatch, state, day):
    lines = _operator_lines(monkeypatch, tmp_path)
    _held_by_a_run_left(cluster, day, state)
    cluster.plan([status_running(), _reach(tmp_path, 100, status_completed())])
    dr, ti = _run_new(dags, day + 1)
    assert dr.state == "success" and ti.try_number == 1 and len(cluster.created) == 1
    assert cluster.locks == {}  # taken over, then released with the new run's success
    assert any("taken over" in x and f"has ended ({state})" in x for x in lines())


def test_stale_lock_after_a_deleted_dag_run_is_taken_over(dags, tmp_path, cluster, monkeypatch):
    lines = _operator_lines(monkeypatch, tmp_path)
    _held_by_a_run_left(cluster, 5, "deferred", delete_run=True)
    cluster.plan([status_running(), _reach(tmp_path, 100, status_completed())])
    dr, _ = _run_new(dags, 6)
    assert dr.state == "success" and len(cluster.created) == 1
    assert any("taken over" in x and "no longer exists" in x for x in lines())


def test_stale_lock_after_a_clear_is_kept_while_the_cleared_task_will_run_again(dags, tmp_path, cluster, capsys):
    """A cleared owner (state None) runs again and its next try takes its own lock back: not gone. The new run
    is refused for good, before creating anything, with the command that frees the run name."""
    held = _held_by_a_run_left(cluster, 7, None)
    cluster.plan([status_running(), _reach(tmp_path, 100, status_completed())])
    dr, ti = _run_new(dags, 8)
    assert dr.state == "failed" and ti.try_number == 1 and cluster.created == []
    assert list(cluster.locks) == [(NS, held.name)] and held.read()["owner"]["run_id"] == held.owner["run_id"]
    out = capsys.readouterr().out
    assert f"mtc unlock {RUN_NAME} -n {NS}" in out and "is still none" in out


def test_stale_lock_after_a_deleted_event_is_released(dags, tmp_path, cluster):
    cluster.plan([status_running(), lambda obj: cluster.delete(NS, cluster.created[-1]) or {}])
    dr, ti = _run_new(dags, 10)
    assert dr.state == "failed" and ti.try_number == 1  # DELETED fails for good ...
    assert cluster.locks == {}  # ... and frees the run name


def test_an_error_on_the_last_try_keeps_the_jobset_the_run_lock_and_tells_the_teardown(dags, tmp_path, cluster):
    """The watch breaks (an ERROR event: lost track of the JobSet) on the last try: no retry will reattach, but the
    JobSet may still be training, so like any fault of the orchestrator the try ends with the JobSet and the run
    lock kept and `jobset_kept` recorded for the teardown (which then deletes nothing: tests/dags/
    test_teardown_rule.py)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from mtc_provider.operators.jobset_failures import JOBSET_KEPT_XCOM_KEY

    def die(obj):
        raise RuntimeError("the watch broke")

    cluster.plan([status_running(), die])
    dr = dags.reattach.test(logical_date=_day(12), run_after=_day(12))  # retries=0: this is the last try
    assert dr.state == "failed"
    assert cluster.locks != {}  # kept: the run is not over, clearing the task reattaches
    assert cluster.live() == cluster.created  # nothing deleted it
    with create_session() as session:
        kept = session.query(XComModel).filter_by(dag_id=dr.dag_id, run_id=dr.run_id, task_id="train",
                                                  key=JOBSET_KEPT_XCOM_KEY).one()
    assert "no retry is left to reattach" in str(kept.value), kept.value
    (lock,) = [obj for (_, name), obj in cluster.locks.items() if name.startswith("mtc-run-")]
    # the run's ledger says what interrupted the watch
    assert [i["kind"] for i in json.loads(lock["data"]["ledger"])["interruptions"]] == ["orchestrator-fault"]


def _watching(gc, kind, jobset):
    """The operator whose synchronous try watches `jobset` now (dag.test runs the task in this process)."""
    def watches(o) -> bool:
        try:  # some objects an earlier test left behind (proxies) raise on any look
            return type(o) is kind and (o.__dict__.get("_current") or ("", "", ""))[2] == jobset["metadata"]["name"]
        except Exception:  # noqa: BLE001
            return False

    (operator,) = [o for o in gc.get_objects() if watches(o)]
    return operator


def _operator_lines(monkeypatch, tmp_path):
    """The launch operator's log lines, read back from a file (see js_airflow_db.file_logger)."""
    from mtc_provider.operators.jobset import MtcJobSetOperator

    path = tmp_path / "operator.log"
    logger = file_logger(path)
    monkeypatch.setattr(MtcJobSetOperator, "log", property(lambda self: logger))
    return lambda: path.read_text().splitlines() if path.exists() else []


def test_sync_run_deleted_deletes_the_jobset_and_frees_the_run_name(dags, tmp_path, cluster, monkeypatch):
    """deferrable=False, and a user deletes the DAG run mid-watch: the worker's supervisor gets 404 on its next
    heartbeat and SIGTERMs the task, whose on_kill runs (task-sdk/src/airflow/sdk/execution_time/supervisor.py
    @3.3.2 `_send_heartbeat_if_needed`, task_runner.py `_on_term`). No try of that run will ever come back, so the
    kill asks Airflow, finds no task instance, and deletes the JobSet and the run lock, saying why."""
    import gc

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from mtc_provider.operators.jobset import MtcJobSetOperator

    lines = _operator_lines(monkeypatch, tmp_path)

    def delete_run_then_sigterm(obj):
        with create_session() as session:  # "Delete Dag Run" in the UI (its task instances go with it)
            session.delete(session.query(DagRun).filter_by(dag_id="mtc_reattach", logical_date=_day(14)).one())
        # The running try's operator (dag.test runs the task in this process): its on_kill, as SIGTERM calls it.
        _watching(gc, MtcJobSetOperator, obj).on_kill()
        return status_running()

    # Were the JobSet kept, the watch would go on until it completes (then the assertions below fail at once).
    cluster.plan([status_running(), delete_run_then_sigterm, status_completed()])
    try:
        dags.reattach.test(logical_date=_day(14), run_after=_day(14))  # deferrable=False, retries=0
    except Exception:  # noqa: BLE001 - dag.test cannot record the end of a task whose DAG run is gone
        pass
    assert cluster.deleted == cluster.created and len(cluster.created) == 1
    assert cluster.locks == {}
    (line,) = [x for x in lines() if "JobSet" in x and ("kept" in x or "deleting" in x)]
    assert line.startswith("deleting JobSet default/train-") and "no longer exists (deleted by a user)" in line


def test_sync_worker_sigterm_while_running_keeps_the_jobset(dags, tmp_path, cluster, monkeypatch):
    """The worker's own SIGTERM (a deploy) while Airflow still says `running`: kept, and the log says so."""
    import gc

    from mtc_provider.operators.jobset import MtcJobSetOperator

    lines = _operator_lines(monkeypatch, tmp_path)

    def sigterm(obj):
        _watching(gc, MtcJobSetOperator, obj).on_kill()
        return status_running()

    cluster.plan([status_running(), sigterm, _reach(tmp_path, 100, status_completed())])
    dr = dags.retry_sync.test(logical_date=_day(16), run_after=_day(16))
    assert dr.state == "success" and cluster.deleted == []
    (line,) = [x for x in lines() if "JobSet" in x and ("kept" in x or "deleting" in x)]
    assert "kept" in line and "is still alive (state running)" in line


def test_stale_lock_of_an_owner_up_for_retry_is_kept(dags, tmp_path, cluster, capsys):
    """up_for_retry is a try that Airflow will run again (its next try reattaches to its JobSet): not gone."""
    held = _held_by_a_run_left(cluster, 18, "up_for_retry")
    cluster.plan([status_running(), _reach(tmp_path, 100, status_completed())])
    dr, ti = _run_new(dags, 19)
    assert dr.state == "failed" and cluster.created == []
    assert held.read()["owner"]["run_id"] == held.owner["run_id"]
    assert "is still up_for_retry" in capsys.readouterr().out


def test_stale_lock_is_kept_when_airflow_cannot_be_asked(dags, tmp_path, cluster, monkeypatch, capsys):
    """The execution API down while a launch asks about the lock's owner: unknown is never gone."""
    from mtc_provider.adapters import task_state

    held = _held_by_a_run_left(cluster, 20, "failed")  # would be taken over, could Airflow be asked
    monkeypatch.setattr(task_state, "try_lookup",
                        lambda owner: (None, "ConnectError: [Errno 111] Connection refused"))
    cluster.plan([status_running(), _reach(tmp_path, 100, status_completed())])
    dr, _ = _run_new(dags, 21)
    assert dr.state == "failed" and cluster.created == []
    assert held.read()["owner"]["run_id"] == held.owner["run_id"]
    assert "could not ask Airflow about" in capsys.readouterr().out


def test_sync_kill_between_the_create_and_the_records_deletes_the_new_attempt(dags, tmp_path, cluster, monkeypatch):
    """A user deletes the DAG run while the worker has just created its attempt and not yet written its records:
    the SIGTERM's on_kill (task_runner.py@3.3.2 `_on_term`) must know the attempt it just created, or the JobSet
    trains on, watched by no one, until the run's teardown."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from mtc_provider.operators import jobset as operator_module
    from mtc_provider.operators.jobset import MtcJobSetOperator

    lines = _operator_lines(monkeypatch, tmp_path)
    real_write, real_journal = operator_module.write_run_record, MtcJobSetOperator._journal_for
    running = []  # the operator whose try runs now (dag.test runs it in this process)

    def journal_for(self, *args, **kwargs):
        running.append(self)
        return real_journal(self, *args, **kwargs)

    def killed_while_recording(place, state, *args, **kwargs):
        if state == "running":  # "attempt submitted": the JobSet exists, the run record is being written
            with create_session() as session:
                session.delete(session.query(DagRun).filter_by(dag_id="mtc_reattach", logical_date=_day(22)).one())
            running[-1].on_kill()
            raise RuntimeError("SIGTERM")  # the task stops here, as the supervisor's signal stops it
        return real_write(place, state, *args, **kwargs)

    monkeypatch.setattr(operator_module, "write_run_record", killed_while_recording)
    monkeypatch.setattr(MtcJobSetOperator, "_journal_for", journal_for)
    cluster.plan([status_running(), status_running(), status_completed()])
    # dag.test logs the task's error (and cannot record the end of a task whose DAG run is gone) and returns
    with contextlib.suppress(Exception):
        dags.reattach.test(logical_date=_day(22), run_after=_day(22))  # deferrable=False, retries=0
    assert len(cluster.created) == 1 and cluster.deleted == cluster.created
    (line,) = [x for x in lines() if "JobSet" in x and ("kept" in x or "deleting" in x)]
    assert line.startswith("deleting JobSet default/train-") and "no longer exists (deleted by a user)" in line
