"""An expected resubmission reads as one (issue #26): one line naming the reason and the step the next attempt
resumes from, and Airflow's retry carries that reason (its retry policy hook), in a real Airflow run.

What Airflow 3.3 allows: its task runner logs every exception that ends a try as "Task failed with exception"
(ERROR, with the traceback) before any retry decision (airflow/sdk/execution_time/task_runner.py@3.3.2, `run`:
the `except (AirflowTaskTimeout, AirflowException, AirflowRuntimeError)` branch), so that line stays. The task's
`retry_policy` (airflow.sdk.definitions.retry_policy) may answer RETRY with a reason, which the runner logs as
"Retry policy decision" and sends as the RetryTask's `retry_reason`. A reschedule (the only non-error way to end a
try and come back) keeps the try number, which names the attempt's JobSet, so it is no way to resubmit.
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.js_helpers import ckpt_dir, finalize, reach as _reach
from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.jobset_fixtures import load_bundle_dags
from mtc_provider.core.attempt.resubmission import in_try_line, resubmission_line

pytestmark = pytest.mark.timeout(300)
LOGICAL = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_the_line_names_the_reason_the_next_try_and_the_step():
    line = resubmission_line("completed at step 60 below the target step 100 (MaxText exits 0 when preempted).",
                             60, 1, 6, 100)
    assert line == ("resubmitting (try 2 of 7 next): completed at step 60 below the target step 100 (MaxText exits "
                    "0 when preempted); the next attempt resumes from step 60 of 100 (the newest restorable checkpoint)")
    assert resubmission_line("completed below target, likely preempted (last finalized step 60, target 100); "
                             "resubmitting to resume", 60, 1, 4).startswith(
        "resubmitting (try 2 of 5 next): completed below target, likely preempted (last finalized step 60, target "
        "100); the next attempt resumes")
    assert resubmission_line("the JobSet failed", None, 3, None).endswith(
        "(try 4 next): the JobSet failed; the next attempt starts from step 0 (no finalized checkpoint yet)")


def test_a_preempted_attempt_logs_one_resubmission_line_and_the_retry_carries_it(
        monkeypatch, tmp_path, airflow_db, cluster, capfd):
    dags = load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")
    # step 60 exists before the run, so the preempted attempt makes no progress: a retry is spent (one that
    # progressed is followed in the same try instead: test_an_interruption_after_progress_...)
    finalize(ckpt_dir(tmp_path), 60)
    cluster.plan([status_running(), _reach(tmp_path, 60, status_completed())],  # preempted: exit 0 below target
                 [status_running(), _reach(tmp_path, 100, status_completed())])
    dr = dags.retry_sync.test(logical_date=LOGICAL, run_after=LOGICAL)
    out = capfd.readouterr()
    log = out.out + out.err
    assert dr.state == "success" and dr.get_task_instance("train").try_number == 2
    lines = [line for line in log.splitlines() if "resubmitting (try 2 of" in line]
    assert lines, log[-4000:]
    assert "the next attempt resumes from step 60 of 100 (the newest restorable checkpoint)" in lines[0]
    assert "warning" in lines[0].lower()  # a warning, not an error
    # Airflow's retry policy hook carries the same reason (logged by the task runner, kept as retry_reason).
    decisions = [line for line in log.splitlines() if "Retry policy decision" in line]
    assert decisions and "resubmitting (try 2 of" in decisions[0] and "retry" in decisions[0]
    # No chained "During handling of the above exception" traceback: the exception is raised from None.
    assert "During handling of the above exception" not in log
    import os
    if os.environ.get("MTC_PEEK"):
        open("/tmp/resub.log", "w").write(log)


def test_an_interruption_after_progress_says_the_same_try_follows_it():
    line = in_try_line("completed below target, likely preempted (last finalized step 57, target 70); resubmitting "
                       "to resume", 40, 57, 8, 70)
    assert line == ("resubmitting in this try (attempt 8 next; no Airflow retry spent: the attempt progressed from "
                    "step 40 to step 57): completed below target, likely preempted (last finalized step 57, target "
                    "70); the next attempt resumes from step 57 of 70 (the newest restorable checkpoint)")
    assert "from no checkpoint to step 5" in in_try_line("failed", None, 5, 2)
