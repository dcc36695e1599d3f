"""Continue a DAG run whose `airflow dags test` process was SIGKILLed, as a scheduler would.

    python chaos_resume.py <dag_id> <logical date>

`airflow dags test` of the same logical date would not do: it deletes the run and makes a new one with a new
run_id (a new run, not a retry). A scheduler instead finds the killed try without a heartbeat and, with retries
left, sets it up for retry (Airflow's `_purge_task_instances_without_heartbeats`); the next try then runs in
the same DAG run. This script does that to the killed launch try, then drives the same run with dag.test()'s
own loop (its run creation and clearing switched off, so the run and its history stay).
"""

from __future__ import annotations

import sys
from datetime import datetime
from unittest import mock


def main(dag_id: str, logical_date: str) -> int:
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.serialization.definitions.dag import SerializedDAG
    from airflow.utils import timezone
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    when = datetime.fromisoformat(logical_date)
    dag = DagBag().get_dag(dag_id)
    session = settings.Session()
    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.logical_date == when))
    if run is None or run.state != DagRunState.RUNNING:
        print(f"no running DAG run of {dag_id} at {logical_date}: {run and run.state}", flush=True)
        return 3
    orphaned = [ti for ti in run.get_task_instances(session=session)
                if ti.state in (TaskInstanceState.RUNNING, TaskInstanceState.QUEUED, TaskInstanceState.DEFERRED)]
    for ti in orphaned:  # the scheduler's verdict on a try whose worker died: up for retry (retries are left)
        print(f"task {ti.task_id} try {ti.try_number} lost its worker ({ti.state}): up for retry", flush=True)
        ti.prepare_db_for_next_try(session)
        ti.state = TaskInstanceState.UP_FOR_RETRY
        ti.end_date = timezone.utcnow()
        ti.clear_next_method_args()  # the next try starts with execute(), not the dead try's resume point
    session.commit()
    def same_run(*, dag, **_):
        resumed = session.merge(run)
        resumed.dag = dag  # as create_dagrun would
        return resumed

    with mock.patch("airflow.models.dagrun.get_or_create_dagrun", same_run), \
            mock.patch.object(SerializedDAG, "clear_dags", lambda *a, **k: 0):
        result = dag.test(logical_date=when)
    print(f"DAG run {result.run_id} ended {result.state}", flush=True)
    return 0 if result.state == DagRunState.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
