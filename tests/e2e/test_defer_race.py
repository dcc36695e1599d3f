"""A deferred task's resumed try is not failed by the late end of its deferring process (the benchmark's lost try,
docs/benchmarks.md section 2): a real Airflow (the e2e session's one, airflow_harness) runs
tests/e2e/preload_dags/defer_race.py on `PreloadLocalExecutor`, whose deferring process ends only once the resumed
try runs. Airflow 3.3.2's scheduler fails a `queued` or `running` try that an executor reports `success` for
(jobs/scheduler_job_runner.py `process_executor_events`: its resume-after-defer guard covers `scheduled` only;
apache/airflow#67287, #72716), and with `retries=0` the run fails; the executor reports that end only when no
other process of the try is in flight (mtc_provider.executors.local).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAG_ID = "defer_race"


def test_the_deferring_process_ending_late_does_not_fail_the_resumed_try(airflow_server, tmp_path):
    server = airflow_server
    server.wait_for_dag(DAG_ID)
    server.unpause(DAG_ID)
    run_id = server.trigger(DAG_ID, {"dir": str(tmp_path)})
    run = server.wait_for_run(DAG_ID, run_id, timeout=600)
    mismatches = [e for e in server.api("GET", "/eventLogs", params={"dag_id": DAG_ID, "run_id": run_id,
                                                                      "event": "state mismatch"})["event_logs"]]
    assert run["state"] == "success", f"{mismatches}\n{server.failure_report(DAG_ID, run_id)}"
    assert not mismatches
    result = server.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/wait/xcomEntries/return_value")
    # the race was there: the deferring process ended while the resumed try ran, and it was the first try's
    assert result["value"] == {"try_number": 1, "deferring_process_ended_during_resume": True}
    assert "not reported, so it cannot fail the resumed try" in server.log_path("scheduler").read_text(errors="replace")
