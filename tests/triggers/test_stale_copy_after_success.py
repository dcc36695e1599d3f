"""A stale copy of train's trigger, cancelled after the try succeeded, keeps the ended JobSet (issue #33 soak).

Found by the soak with Airflow's own faults: the trigger moved to the other triggerer (the first one's heartbeat
lapsed under load), the new copy's event resumed `train`, which succeeded; the first triggerer then cancelled its
stale copy, whose `on_kill` asked Airflow, heard `success` (a user's mark-success answers the same) and deleted the
Completed JobSet as a user's kill. An ended JobSet has nothing to stop: the teardown deletes it. A JobSet still
training when Airflow answers `success` is a user's mark, and is deleted as before.

Real Airflow 3.3 pieces as in test_clear_keeps.py: the task instance is a row of this session's SQLite database
and on_kill asks through the Task SDK's in-process supervisor comms (GetTaskStates -> execution API -> database).
"""

from __future__ import annotations

import pytest
from airflow.utils.session import create_session
from airflow.utils.state import TaskInstanceState

from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.jobset_fixtures import load_bundle_dags
from tests.support.js_airflow_db import file_logger, make_dag_run
from tests.triggers.test_clear_keeps import DAG_ID, DAY, _deferred_trigger, _kill, _task_instance

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("jobset_status, deleted", [(status_completed(), False), (status_running(), True)])
def test_a_cancelled_copy_after_success_keeps_an_ended_jobset_and_deletes_a_training_one(
        airflow_db, cluster, tmp_path, monkeypatch, jobset_status, deleted):
    from mtc_provider.triggers.jobset import JobSetTrigger

    load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")
    lines_at = tmp_path / "trigger.log"
    logger = file_logger(lines_at)
    monkeypatch.setattr(JobSetTrigger, "log", property(lambda self: logger))
    with create_session() as session:
        ti = make_dag_run(session, DAG_ID, DAY, state=TaskInstanceState.DEFERRED)
        run_id, ti_id = ti.run_id, ti.id
    cluster.plan([status_running()])
    trigger = _deferred_trigger(tmp_path, run_id, ti_id, 1)
    cluster.objects[(trigger.namespace, trigger.name)]["status"] = jobset_status
    with create_session() as session:
        done = _task_instance(session, run_id)
        done.state = TaskInstanceState.SUCCESS  # the try's own success, or a user's mark: the same answer
        session.merge(done)
    _kill(trigger)
    said = lines_at.read_text()
    if deleted:
        assert cluster.deleted == [trigger.name] and "was marked success (a user's action)" in said
    else:
        assert cluster.deleted == [] and "kept: it has ended and" in said and "succeeded; nothing to stop" in said
