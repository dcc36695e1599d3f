"""A DAG for tests/operators/jobset/test_js_ownership_lock.py: its task instance is put in the deferred state by hand, on the
JobSetTrigger, so the real triggerer (TriggerRunnerSupervisor) runs that trigger."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("mtc_owner_deferred", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
         catchup=False) as owner_deferred:
    EmptyOperator(task_id="train")
