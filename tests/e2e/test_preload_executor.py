"""The LocalExecutor preload under a real Airflow (api-server, scheduler, dag-processor, triggerer: the e2e
session's one Airflow, airflow_harness.session_env): one scheduler runs Airflow's LocalExecutor and
`mtc_provider.executors.local.PreloadLocalExecutor` side by side (Airflow's multiple executors, `[core] executor` a list; Airflow's first, so its workers are forked
before the preload). A task on each reports which of `mtc_provider.preload.PRELOAD` its task process already had
when its callable ran: all of them on the preload executor, none on Airflow's own (the control).
"""

from __future__ import annotations

import pytest

from mtc_provider.preload import PRELOAD

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_task_on_the_preload_executor_starts_with_the_modules(airflow_server):
    server = airflow_server
    server.wait_for_dag("preload_probe")
    server.unpause("preload_probe")
    run_id = server.trigger("preload_probe", {})
    run = server.wait_for_run("preload_probe", run_id, timeout=600)
    assert run["state"] == "success", server.failure_report("preload_probe", run_id)
    found = {task: server.api("GET", f"/dags/preload_probe/dagRuns/{run_id}/taskInstances/{task}/xcomEntries/"
                                     "return_value")["value"]
             for task in ("plain", "preloaded")}
    assert found == {"plain": [], "preloaded": list(PRELOAD)}
