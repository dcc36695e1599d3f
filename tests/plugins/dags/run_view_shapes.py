"""DAGs the run view tests read (tests/plugins/test_run_view_gke.py): a GKE-shaped training run and an unrelated one.

The launch task stands in for MtcJobSetOperator (the run view finds it by its operator's class name) and pushes the
XComs the real operator pushes at a try's launch (operators/jobset.py: `mtc_run`, `attempts`) and the trigger's
last `progress` report (core.measure.progress_report.ProgressReport.to_xcom), and the run `ledger` when set, from the values the test sets in the
environment. The test then puts the task in the state a deferred try is in (a trigger row naming its JobSet).
"""

from __future__ import annotations

import json
import os

import pendulum
from airflow.sdk import DAG, BaseOperator


class MtcJobSetOperator(BaseOperator):  # core.view.run_page.LAUNCH_OPERATOR
    def execute(self, context):
        for key in ("mtc_run", "attempts", "progress", "ledger"):  # the ledger only where the test sets one
            if f"MTC_TEST_{key.upper()}" in os.environ:
                context["ti"].xcom_push(key=key, value=json.loads(os.environ[f"MTC_TEST_{key.upper()}"]))


class Report(BaseOperator):
    def execute(self, context):
        return "nothing to do with training"


with DAG("mtc_gke_shaped", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as gke_shaped:
    MtcJobSetOperator(task_id="train") >> Report(task_id="after")

with DAG("mtc_unrelated", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as unrelated:
    Report(task_id="report")
