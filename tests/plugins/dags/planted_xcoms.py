"""DAGs whose task code plants the XComs the run view reads (tests/plugins/).

Task code may push any XCom: these stand in for the launch and goodput tasks (the run view finds them by their
operator's class name) and name whatever folder the test sets in the environment. `mtc_dag_a` and `mtc_dag_b` are
two teams' DAGs for the per-DAG access tests.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, BaseOperator


class MtcJobSetOperator(BaseOperator):  # the name the run view looks for (core.view.run_page.LAUNCH_OPERATOR)
    def execute(self, context):
        context["ti"].xcom_push(key="mtc_run", value={"checkpoint_dir": os.environ["MTC_TEST_PLANTED_DIR"]})


class GoodputReportOperator(BaseOperator):  # core.view.run_page.GOODPUT_OPERATOR
    def execute(self, context):
        return {"chart_path": os.environ["MTC_TEST_PLANTED_CHART"], "goodput": 0.5}


with DAG("mtc_planted_xcoms", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as planted:
    MtcJobSetOperator(task_id="train") >> GoodputReportOperator(task_id="goodput")

with DAG("mtc_dag_a", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag_a:
    MtcJobSetOperator(task_id="train")

with DAG("mtc_dag_b", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag_b:
    MtcJobSetOperator(task_id="train")
