"""Rows in this test session's real Airflow database (SQLite): the bundle DAGs synced, a DAG run whose task
instance is left in the state a user's action (or a deferral) leaves it in. What `dag.test()` does to start a
run (apache/airflow task-sdk/src/airflow/sdk/definitions/dag.py@3.3.2, `DAG.test`), without running it."""

from __future__ import annotations

import datetime as dt

BUNDLE = "mtc-jobset-tests"


def sync_bundle(session) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db(session=session)
    session.commit()
    bundle = manager.get_bundle(BUNDLE)
    bundle.initialize()
    sync_bag_to_db(BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name),
                   bundle.name, bundle.version)


def make_dag_run(session, dag_id: str, logical_date: dt.datetime, task_id: str = "train", state=None,
                 try_number: int = 1):
    """A DAG run of a bundle DAG, with `task_id`'s instance at `try_number` in `state`; returns that instance."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun, get_or_create_dagrun
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    sync_bundle(session)
    dag = DBDagBag().get_latest_version_of_dag(dag_id, session=session)
    run_id = DagRun.generate_run_id(run_type=DagRunType.MANUAL, logical_date=logical_date, run_after=logical_date)
    dr = get_or_create_dagrun(dag=dag, start_date=logical_date, logical_date=logical_date, data_interval=None,
                              run_after=logical_date, run_id=run_id, session=session, conf={},
                              triggered_by=DagRunTriggeredByType.TEST, triggering_user_name="test")
    ti = dr.get_task_instance(task_id, session=session)
    ti.try_number = try_number
    ti.state = state
    session.merge(ti)
    session.commit()
    return ti
