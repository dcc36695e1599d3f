"""Interruptions are counted by progress, not by Airflow's retries (issue #32, problem 3).

A graceful preemption or maintenance event makes MaxText save and exit 0 (the JobSet completes below its target); a
host loss beyond `maxRestarts` fails the JobSet retryably. Each such attempt that made progress (its end step above
its start step) is followed in the same Airflow try (core.attempt.resubmission.resubmit_in_try): no retry is spent, so a run
interrupted hourly for a week is never used up by a fixed count. Attempts without progress still spend retries, and
`crash_loop_attempts` of them in a row end the run with the reason.

Driven through the launch operator's end-of-attempt path (`execute` -> trigger -> `execute_complete` -> `_end_attempt`
-> operators.jobset_end `settle` -> `judge` -> `conclude`) on the in-memory JobSet cluster (tests/doubles/memory_jobset.py: JobSet conditions with JobSet's own
reasons, foreground deletion), synchronous tries with a DB-free task instance (tests/support/js_helpers.FakeTI).
"""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.core.attempt import interruptions
from mtc_provider.core.attempt.attempt_records import read_attempts
from mtc_provider.core.attempt.resubmission import RETRY, Decision, resubmit_in_try
from mtc_provider.operators.jobset import JobSetAttemptFailed
from tests.doubles.memory_jobset import status_completed, status_failed, status_running
from tests.support.js_helpers import FakeTI, ckpt_dir, finalize, launch, reach, run_try

pytestmark = pytest.mark.timeout(300)
INTERRUPTIONS = 55


def _interrupted(tmp_path, step: int, graceful: bool):
    """One attempt: it runs, saves `step`, then is preempted (completes below target) or loses hosts until its
    in-cluster restarts run out (ReachedMaxRestarts, retryable)."""
    end = status_completed() if graceful else status_failed(restarts=2)
    return [status_running(), reach(tmp_path, step, end)]


GAIN = 60  # steps each attempt saves: three persistent save periods (launch's checkpoint_period 20)
TARGET = GAIN * (INTERRUPTIONS + 1)


def test_fifty_five_interruptions_each_after_progress_spend_no_retry(tmp_path, cluster, fast_retries):
    kinds = [i % 3 != 2 for i in range(INTERRUPTIONS)]  # two graceful ends, then a host loss, and so on
    cluster.plan(*[_interrupted(tmp_path, GAIN * (i + 1), graceful) for i, graceful in enumerate(kinds)],
                 [status_running(), reach(tmp_path, TARGET, status_completed())])
    ti = FakeTI(try_number=1, max_tries=6)  # the training DAG's 6 retries; a fixed count of 7 events would end it
    result = run_try(launch(str(tmp_path), retries=6, target_step=TARGET), ti)

    assert result["last_step"] == TARGET and result["attempt"] == INTERRUPTIONS + 1
    # one try, INTERRUPTIONS + 1 attempts, each named by its attempt number (not the try's)
    assert [n.rsplit("-", 1)[1] for n in cluster.created] == [f"a{i}" for i in range(1, INTERRUPTIONS + 2)]
    # every ended attempt deleted by the attempt's own end, before the next one, saying why
    assert cluster.delete_reasons == [(n, "attempt-ended") for n in cluster.created[:-1]]
    attempts = ti.xcoms["attempts"]
    assert [a["attempt"] for a in attempts] == list(range(1, INTERRUPTIONS + 2))
    assert {a["try"] for a in attempts} == {1}
    counts = interruptions.count(read_attempts(attempts))
    assert counts == {"graceful": kinds.count(True), "failed": kinds.count(False),
                      "restarts": 2 * kinds.count(False), "in_try": INTERRUPTIONS}


def test_interruptions_that_each_save_one_step_end_over_budget_in_the_first_try(tmp_path, cluster, fast_retries):
    """Every attempt progresses, by one step of a checkpoint_period of 20: the run is interrupted as often as it
    saves. The budget (six interruptions, one save period each) ends it, not the 55th interruption."""
    kinds = [i % 3 != 2 for i in range(INTERRUPTIONS)]
    cluster.plan(*[_interrupted(tmp_path, i + 1, graceful) for i, graceful in enumerate(kinds)])
    ti = FakeTI(try_number=1, max_tries=6)
    with pytest.raises(AirflowFailException, match=r"over budget: the last 6 interruptions \(attempts 1-4\) gained 4 "
                                                   r"restorable steps \(from step 0 to 4\), not more than 20 "
                                                   r"\(min_steps_per_interruption\) each"):
        run_try(launch(str(tmp_path), retries=6), ti)
    assert len(cluster.created) == 4 and {a["try"] for a in ti.xcoms["attempts"]} == {1}


def test_without_progress_the_crash_loop_guard_still_ends_the_run_with_its_reason(tmp_path, cluster, fast_retries):
    # two attempts with progress (followed in try 1), then attempts that never pass step 2
    cluster.plan(_interrupted(tmp_path, 1, True), _interrupted(tmp_path, 2, False),
                 *[[status_running(), status_completed()]] * 3)
    op = launch(str(tmp_path), retries=6, crash_loop_attempts=2)
    first = FakeTI(try_number=1)
    with pytest.raises(JobSetAttemptFailed, match=r"resubmitting \(try 2 of 7 next\): completed below target"):
        run_try(op, first)  # attempt 3 made no progress: that one spends a retry
    assert len(cluster.created) == 3
    with pytest.raises(AirflowFailException, match=r"crash loop: no restorable progress across 2 consecutive "
                                                   r"attempts \(steps at attempt starts \[None, 1, 2, 2\]"):
        run_try(launch(str(tmp_path), retries=6, crash_loop_attempts=2), FakeTI(try_number=2, max_tries=6))
    assert [n.rsplit("-", 1)[1] for n in cluster.created] == ["a1", "a2", "a3", "a4"]  # try 2 went on from a4
    counts = interruptions.count(read_attempts(first.xcoms["attempts"]))
    assert counts["in_try"] == 2 and counts["graceful"] == 2 and counts["failed"] == 1


def test_an_interruption_on_the_last_try_after_progress_does_not_end_the_run(tmp_path, cluster, fast_retries):
    """The last try has no retry left, but an attempt that made progress is followed in it all the same."""
    finalize(ckpt_dir(tmp_path), 10)
    cluster.plan(_interrupted(tmp_path, 20, True), [status_running(), reach(tmp_path, 100, status_completed())])
    result = run_try(launch(str(tmp_path), retries=1), FakeTI(try_number=2, max_tries=1))
    assert result["last_step"] == 100 and len(cluster.created) == 2


@pytest.mark.parametrize(("history", "latest", "kind", "expected"), [
    ([None], 5, RETRY, True), ([5], 6, RETRY, True), ([5], 5, RETRY, False), ([5, 5], None, RETRY, False),
    ([None], None, RETRY, False), ([None], 5, "fail", False), ([None], 100, "succeed", False)])
def test_only_a_retry_after_progress_is_followed_in_the_same_try(history, latest, kind, expected):
    assert resubmit_in_try(Decision(kind, "why"), history, latest) is expected


def test_an_unexpected_error_at_the_end_of_the_last_try_keeps_the_jobset_and_the_run_lock(tmp_path, cluster,
                                                                                       monkeypatch):
    """A bug of ours (any exception the provider did not expect) while deciding the last try's end: no retry would
    reattach, so the try ends as a fault of the orchestrator (WatchLost): nothing deleted, the run lock kept and
    `jobset_kept` recorded, so the sample DAG's teardown keeps the JobSet too (tests/dags/test_teardown_rule.py)."""
    from mtc_provider.operators.jobset import JOBSET_KEPT_XCOM_KEY, MtcJobSetOperator
    from mtc_provider.operators.jobset_failures import WatchLost

    def breaks_at_the_end(self, *args, **kwargs):  # closing the attempt the trigger decided on
        raise KeyError("a bug in the end of the attempt")

    monkeypatch.setattr("mtc_provider.operators.jobset_end.judge", breaks_at_the_end)
    cluster.plan([status_running(), reach(tmp_path, 5, status_failed(restarts=2))])
    ti = FakeTI(try_number=1, max_tries=0)
    with pytest.raises(WatchLost, match="KeyError: 'a bug in the end of the attempt'; no retry is left"):
        run_try(launch(str(tmp_path), retries=0), ti)
    assert cluster.deleted == [] and cluster.locks != {}
    assert "no retry is left to reattach" in ti.xcoms[JOBSET_KEPT_XCOM_KEY]["reason"]
    # before the last try the same error stays what it is: the retry reattaches
    cluster.plan([status_running(), reach(tmp_path, 5, status_failed(restarts=2))])
    with pytest.raises(KeyError):
        run_try(launch(str(tmp_path), retries=3, checkpointing={
            "run_name": "other", "base_output_directory": f"{tmp_path}/out", "steps": 100, "checkpoint_period": 20}),
            FakeTI(run_id="run-2", try_number=1, max_tries=3))
