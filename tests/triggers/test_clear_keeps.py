"""A clear of a deferred `train` is one behaviour: the JobSet keeps training and the next try reattaches.

Real Airflow 3.3 pieces: the DAG run and its task instance are rows of this session's SQLite database; the user's
clear is Airflow's own `clear_task_instances` (state None; airflow-core models/taskinstance.py@3.3.2), the
scheduler's next step is `DagRun.schedule_tis` (state scheduled, try_number + 1; models/dagrun.py@3.3.2), and the
trigger's `on_kill` asks through the Task SDK's real in-process supervisor comms (InProcessTestSupervisor, as
`dag.test()` runs triggers: GetTaskStates -> the in-process execution API -> the database). Before this rule the
first state deleted the JobSet and the second kept it, by timing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import types

import pytest
from airflow.sdk.exceptions import TaskDeferred

from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.jobset_fixtures import load_bundle_dags
from tests.support.js_airflow_db import file_logger, make_dag_run
from tests.support.js_helpers import FakeTI, launch, reach, run_try

pytestmark = pytest.mark.timeout(240)
DAG_ID = "mtc_retry_deferrable"
DAY = dt.datetime(2026, 4, 2, tzinfo=dt.timezone.utc)


def _kill(trigger) -> None:
    """The triggerer cancels the trigger: its on_kill, with Airflow's real in-process supervisor comms."""
    import psutil
    import structlog
    from airflow.sdk.execution_time.supervisor import (InProcessSupervisorComms, InProcessTestSupervisor,
                                                       set_supervisor_comms)

    supervisor = InProcessTestSupervisor(id=trigger.task_instance.id, pid=os.getpid(), process=psutil.Process(),
                                         process_log=structlog.get_logger(logger_name="task").bind(),
                                         client=InProcessTestSupervisor._api_client())
    supervisor.comms = InProcessSupervisorComms(supervisor=supervisor)
    with set_supervisor_comms(supervisor.comms):
        asyncio.run(trigger.on_kill())


def _task_instance(session, run_id):
    from airflow.models.taskinstance import TaskInstance

    return session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run_id, task_id="train").one()


def _deferred_trigger(tmp_path, run_id, ti_id, try_number):
    op = launch(str(tmp_path), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        run_try(op, FakeTI(dag_id=DAG_ID, run_id=run_id, try_number=try_number))
    trigger = deferred.value.trigger
    # what the triggerer hands a trigger (its TaskInstance DTO): the ids and the try that deferred
    trigger.task_instance = types.SimpleNamespace(id=ti_id, dag_id=DAG_ID, run_id=run_id, task_id="train",
                                                  map_index=-1, try_number=try_number)
    return trigger


def test_a_clear_keeps_the_jobset_whether_airflow_answers_none_or_scheduled(
        airflow_db, cluster, tmp_path, monkeypatch):
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import clear_task_instances
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    from mtc_provider.triggers.jobset import JobSetTrigger

    load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")
    lines_at = tmp_path / "trigger.log"
    logger = file_logger(lines_at)
    monkeypatch.setattr(JobSetTrigger, "log", property(lambda self: logger))
    with create_session() as session:
        ti = make_dag_run(session, DAG_ID, DAY, state=TaskInstanceState.DEFERRED)
        run_id, ti_id = ti.run_id, ti.id
    cluster.plan([status_running(), reach(tmp_path, 100, status_completed())])
    first = _deferred_trigger(tmp_path, run_id, ti_id, 1)

    # 1. The user clears the deferred task: Airflow answers None.
    with create_session() as session:
        clear_task_instances([_task_instance(session, run_id)], session)
    with create_session() as session:
        assert _task_instance(session, run_id).state is None
    _kill(first)
    # 2. The same clear, with the scheduler quicker than the triggerer: the next try is already scheduled.
    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id=DAG_ID, run_id=run_id).one()
        cleared = _task_instance(session, run_id)
        cleared.task = DBDagBag().get_dag_for_run(dag_run, session=session).get_task("train")  # as the scheduler
        dag_run.schedule_tis([cleared], session=session)
    with create_session() as session:
        scheduled = _task_instance(session, run_id)
        assert (scheduled.state, scheduled.try_number) == (TaskInstanceState.SCHEDULED, 2)
    _kill(first)

    kills = [x for x in lines_at.read_text().splitlines() if "trigger cancelled" in x or "deleting JobSet" in x]
    assert len(kills) == 2 and all("kept" in x for x in kills), kills
    assert "try 1 was cleared by a user (state none)" in kills[0] and "reattaches" in kills[0]
    assert "state scheduled" in kills[1]
    assert cluster.deleted == [] and cluster.live() == cluster.created

    # 3. The next try reattaches to the JobSet that kept training.
    second = _deferred_trigger(tmp_path, run_id, ti_id, 2)
    assert second.name == first.name and len(cluster.created) == 1
    with create_session() as session:
        again = _task_instance(session, run_id)
        again.state = TaskInstanceState.DEFERRED  # what try 2's deferral leaves
        session.merge(again)
    _kill(first)
    late = [x for x in lines_at.read_text().splitlines() if "trigger cancelled" in x][-1]
    assert "kept" in late
    assert cluster.deleted == []
