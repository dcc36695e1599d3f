"""The run's record beside its checkpoints (core.attempt.run_summary.run_record): what a later writer keeps.

Seen in the real-Airflow e2e (tests/e2e/test_cli_run.py) on a busy machine: the worker's report of a finished try
got a 404 ("Task Instance not found"), the scheduler ran the task again, and that try took the ended JobSet's
result after the run lock (which holds the attempt history) had been released: it read a fresh lock with no
attempts, and its record would have said the run had none.
"""

from __future__ import annotations

from mtc_provider.core.attempt.run_summary import RETRYING, RUNNING, SUCCEEDED, run_record

OWNER = {"dag_id": "d", "run_id": "r1", "task_id": "train", "try_number": 1}


def _record(state, attempts, previous=None, owner=OWNER):
    return run_record(run_name="run", namespace="default", checkpoint_dir="/b/run/checkpoints", target_step=40,
                      state=state, attempts=attempts, owner=owner, now=2.0, previous=previous)


def test_a_writer_that_no_longer_sees_the_history_keeps_the_recorded_attempts():
    a1 = {"attempt": 1, "jobset": "run-a1", "start": 1.0, "end": 5.0, "outcome": "finished", "last_step": 40}
    first = _record(SUCCEEDED, [a1])
    again = _record(SUCCEEDED, [], previous=first)
    assert again["attempts"] == [a1]


def test_what_the_writer_saw_wins_and_attempts_stay_in_order():
    a1_open = {"attempt": 1, "jobset": "run-a1", "start": 1.0, "end": None, "outcome": None}
    a1_closed = {**a1_open, "end": 3.0, "outcome": "disrupted"}
    a2 = {"attempt": 2, "jobset": "run-a2", "start": 4.0, "end": None, "outcome": None}
    first = _record(RUNNING, [a1_open])
    later = _record(RETRYING, [a2, a1_closed], previous=first)
    assert later["attempts"] == [a1_closed, a2]


def test_another_dag_run_s_record_is_not_carried_over():
    old = _record(SUCCEEDED, [{"attempt": 1, "jobset": "run-a1", "start": 1.0}])
    new = _record(RUNNING, [], previous=old, owner={**OWNER, "run_id": "r2"})
    assert new["attempts"] == []
