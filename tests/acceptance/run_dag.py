"""Run one DAG run in this process, like `airflow dags test DAG DATE -c CONF`, and print the outcome as JSON.

    python tests/acceptance/run_dag.py DAG_FILE DAG_ID LOGICAL_DATE CONF_JSON

The difference from the CLI: run_after is pinned to the logical date. `airflow dags test` passes no
run_after, so Airflow 3.3 names the run `manual__<now>`: rerunning the same logical date replaces the old
run with one of a *new* run_id, which is not the same DAG run (nor what a scheduler retry looks like). With
run_after pinned, a rerun replaces the run with the same run_id and starts the task's tries again, which
is what a task whose process died and is run again sees. AIRFLOW_HOME and the DAGs folder come from the
environment. The last line of stdout is {"state", "tries", "jobset"}.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import sys


def main(dag_file: str, dag_id: str, logical_date: str, conf: str) -> int:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    spec = importlib.util.spec_from_file_location("acceptance_dag_module", dag_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = next(v for v in vars(module).values() if getattr(v, "dag_id", None) == dag_id and hasattr(v, "test"))
    when = dt.datetime.fromisoformat(logical_date)
    run = dag.test(logical_date=when, run_after=when, run_conf=json.loads(conf))
    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
        tries = {ti.task_id: ti.try_number for ti in tis}
        row = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id,
                                             XComModel.task_id == "train", XComModel.key == "jobset").first()
        value = None if row is None else row.value
        jobset = json.loads(value) if isinstance(value, str) else value
    print(json.dumps({"state": str(run.state), "run_id": run.run_id, "tries": tries, "jobset": jobset}), flush=True)
    return 0 if "success" in str(run.state) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
