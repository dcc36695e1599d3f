"""Rows in this test session's real Airflow database (SQLite): the bundle DAGs synced, a DAG run whose task
instance is left in the state a user's action (or a deferral) leaves it in. What `dag.test()` does to start a
run (apache/airflow task-sdk/src/airflow/sdk/definitions/dag.py@3.3.2, `DAG.test`), without running it."""

from __future__ import annotations

import datetime as dt
import logging

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


def enable_provider_loggers() -> None:
    """Airflow's logging set-up (dictConfig, `disable_existing_loggers`) run by an earlier test of the session
    disables loggers created before it; the lines these tests read come from the provider's own loggers."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if "mtc_provider" in name and isinstance(logger, logging.Logger):
            logger.disabled = False



class _AppendHandler(logging.Handler):
    """Opens, appends and closes on every line: no file descriptor for a forked child to lose (the triggerer's
    runner closes what it inherits)."""

    def __init__(self, path) -> None:
        super().__init__()
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(record.getMessage() + "\n")


def file_logger(path) -> logging.Logger:
    """A plain logger writing to `path`, for the provider lines a test reads. Where Airflow's own (structlog)
    output goes depends on which earlier test of the session set logging up, and a forked triggerer runner sets
    it up again; this logger is not registered with `logging`, so no dictConfig can disable it."""
    logger = logging.Logger(f"tests.{path.name}")
    logger.addHandler(_AppendHandler(path))
    logger.setLevel(logging.INFO)
    return logger
