"""Two tasks that report which of the launch tries' first-use imports their task process started with
(tests/e2e/test_preload_executor.py): one on Airflow's LocalExecutor, one on PreloadLocalExecutor."""

import datetime

from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator


def loaded():
    import sys

    from mtc_provider.preload import PRELOAD  # the names only: it imports nothing heavy

    return [name for name in PRELOAD if name in sys.modules]


with DAG(dag_id="preload_probe", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):
    PythonOperator(task_id="plain", python_callable=loaded)
    PythonOperator(task_id="preloaded", python_callable=loaded, executor="PreloadLocalExecutor")
