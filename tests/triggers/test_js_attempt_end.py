"""A plain retry ends in the triggerer (triggers.attempt_end): a TaskFailedEvent after the worker's own bookkeeping
(the attempt record closed in the run lock); everything else still resumes the task. Over the in-memory cluster;
that Airflow 3.3.1+ routes the TaskFailedEvent to up_for_retry is Airflow's (apache/airflow #71163), measured end
to end by `python -m benchmarks.resubmission_e2e` (docs/benchmarks.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.triggers.base import TaskFailedEvent

from tests.support.js_helpers import jobset_body
from tests.doubles.memory_jobset import MemoryJobSetApi, status_failed, status_running
from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
from mtc_provider.adapters.run_lock import ATTEMPTS, RunLock
from mtc_provider.core.basics import labels as L
from mtc_provider.triggers import attempt_end
from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from mtc_provider.triggers.jobset import JobSetTrigger

CONNECTION = {"kind": "local", "home": "/nonexistent/mtc-home"}
TI = SimpleNamespace(dag_id="d", run_id="r", task_id="train", map_index=-1, try_number=1)


REAL_SUPPORTED = attempt_end.supported


@pytest.fixture(autouse=True)
def _airflow_honours_task_failed_retries(monkeypatch):
    """The trigger's side is what these tests read, on whichever Airflow is installed (the lowest-versions job runs
    3.3.0, where `supported()` is False and the task resumes on a worker: the "old airflow" case)."""
    monkeypatch.setattr(attempt_end, "supported", lambda: True)


def _lock(cluster) -> RunLock:
    return RunLock(MemoryJobSetApi(cluster), "default", "run", L.run_labels("d", "r", "train", "run"))


def _setup(cluster, tmp_path, step: int | None = 10, restarts: int = 0):
    cluster.plan([status_running(), status_failed(restarts=restarts)])  # ReachedMaxRestarts: retryable
    cluster.create("default", jobset_body())
    lock = _lock(cluster)
    lock.acquire()
    lock.update(lambda data: data[ATTEMPTS].append({"attempt": 1, "jobset": "train", "start": 1.0, "end": None,
                                                   "outcome": None, "restarts": 0, "last_step": None}))
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    if step is not None:
        (checkpoints / str(step)).mkdir()
        (checkpoints / str(step) / "commit_success.txt").write_text("")
    return lock, str(checkpoints)


def _trigger(checkpoint_dir: str, ti=TI, **extra) -> JobSetTrigger:
    # history [10]: the attempt started at step 10 and ends there (no progress): a plain retry, spent in Airflow
    values = {"attempt": 1, "history": [10], "target_step": 100, "checkpoint_dir": checkpoint_dir,
              "run_name": "run", "namespace": "default", attempt_end.END_RETRY_IN_TRIGGER: True,
              "crash_loop_attempts": 3, "completion": False, **extra}
    trigger = JobSetTrigger(connection=CONNECTION, namespace="default", name="train", checkpoint_dir=checkpoint_dir,
                            extra=values, watch=WatchSettings(times=WatchTimes(poll_interval=0)))
    trigger.task_instance = ti
    return trigger


async def _events(trigger: JobSetTrigger) -> list:
    return [event async for event in trigger.run()]


async def test_a_retryable_failure_ends_the_try_in_the_trigger_with_the_record_closed(cluster, tmp_path):
    lock, checkpoints = _setup(cluster, tmp_path)
    (event,) = await _events(_trigger(checkpoints))
    assert isinstance(event, TaskFailedEvent)
    (record,) = lock.read()[ATTEMPTS]
    assert record["outcome"] == "disrupted" and record["last_step"] == 10 and record["end"] is not None
    assert "resubmitting" in record["reason"], record["reason"]
    # the interruption's kind, as the worker records it (operators.jobset `_finish`): a failure, not followed in-try
    assert record["interruption"] == "failed" and record["in_try"] is False
    assert cluster.deleted == []  # nothing is deleted here: the next try deletes the ended attempt


async def test_the_trigger_s_end_of_a_retry_records_the_run_and_says_one_line(cluster, tmp_path, caplog,
                                                                              capsys):
    """What the worker's end of a retry does, the trigger's does too: the run's record beside its checkpoints says
    "retrying" (mtc status/list read it after the teardown), the JobSet's own restart count is kept, and the log
    says the one resubmission line (a WARNING naming the step it resumes from), not an error."""
    import json
    import logging

    from mtc_provider.core.attempt.run_summary import RECORD_FILE

    lock, checkpoints = _setup(cluster, tmp_path, restarts=3)  # three in-cluster restarts before it failed
    with caplog.at_level(logging.INFO):
        (event,) = await _events(_trigger(checkpoints, ti=SimpleNamespace(**vars(TI), max_tries=3)))
    assert isinstance(event, TaskFailedEvent)
    saved = json.loads((tmp_path / RECORD_FILE).read_text())
    assert saved["state"] == "retrying" and [a["jobset"] for a in saved["attempts"]] == ["train"]
    (record,) = lock.read()[ATTEMPTS]
    assert record["restarts"] == 3
    # Airflow's structlog renders to the output (`[warning  ]`); plain logging records land in caplog
    out = capsys.readouterr().out.splitlines() + [f"[{r.levelname.lower()}] {r.getMessage()}" for r in caplog.records]
    lines = [line for line in out if "resubmitting (try" in line and "-> retry" not in line]
    assert len(lines) == 1 and "[warning" in lines[0] and "error" not in lines[0].split("]")[0], lines
    assert "resubmitting (try 2 of 4 next)" in lines[0] and "resumes from step 10 of 100" in lines[0]
    assert any("the triggerer ends this try (TaskFailedEvent)" in line for line in out), out


@pytest.mark.parametrize("case", ["no task instance", "last try", "crash loop", "target reached", "old airflow",
                                  "progressed"])
async def test_anything_but_a_plain_retry_resumes_the_task(cluster, tmp_path, monkeypatch, case):
    lock, checkpoints = _setup(cluster, tmp_path, step=100 if case == "target reached" else 10)
    trigger = _trigger(checkpoints, **{
        "no task instance": {}, "last try": {attempt_end.END_RETRY_IN_TRIGGER: False},
        "crash loop": {"history": [10, 10], "crash_loop_attempts": 2}, "target reached": {},
        "old airflow": {},
        # interrupted after progress (no checkpoint -> step 10): the same try submits the next attempt, on a worker
        # (core.attempt.resubmission.resubmit_in_try), which closes the record as it does for any end it decides
        "progressed": {"history": [None]}}[case])
    if case == "no task instance":  # dag.test() and the synchronous path run the trigger without one
        trigger.task_instance = None
    if case == "old airflow":  # before 3.3.1 a TaskFailedEvent failed the task for good, retries ignored
        monkeypatch.setattr(attempt_end, "supported", REAL_SUPPORTED)
        monkeypatch.setattr("airflow.__version__", "3.3.0")
    (event,) = await _events(trigger)
    assert not isinstance(event, TaskFailedEvent)
    assert JobSetEvent.from_payload(event.payload).kind == ENDED
    assert lock.read()[ATTEMPTS][0]["end"] is None  # the worker closes it, as before


async def test_a_failing_listing_leaves_the_decision_to_the_worker(cluster, tmp_path, monkeypatch):
    """The worker waits a listing outage out for listing_timeout; the trigger does not decide without the step."""
    lock, checkpoints = _setup(cluster, tmp_path)
    trigger = _trigger(checkpoints)

    async def failing(after=None):
        raise OSError("listing unavailable")

    monkeypatch.setattr(trigger, "newest_checkpoints", failing)
    (event,) = await _events(trigger)
    assert JobSetEvent.from_payload(event.payload).kind == ENDED
    assert lock.read()[ATTEMPTS][0]["end"] is None


async def test_the_run_s_record_and_the_xcoms_go_out_together_before_the_try_ends(cluster, tmp_path, monkeypatch):
    """The run's record (a blocking write beside the checkpoints) and the XCom round trips through the triggerer's
    comms are independent: they overlap, so the try ends after the slower of the two, not after both in a row; and
    both are done before the TaskFailedEvent."""
    import asyncio
    import threading

    from mtc_provider.adapters.attempt_journal import AttemptJournal

    pushing, done = threading.Event(), []
    writing_saw_pushes = []

    def record_run(self, *args, **kwargs):
        writing_saw_pushes.append(pushing.wait(timeout=5.0))  # sequential: the pushes only start after this returns
        done.append("record")

    async def push_xcoms(trigger, ti, pushed):
        pushing.set()
        await asyncio.sleep(0)
        done.append("xcoms")

    monkeypatch.setattr(AttemptJournal, "record_run", record_run)
    monkeypatch.setattr(attempt_end, "push_xcoms", push_xcoms)
    lock, checkpoints = _setup(cluster, tmp_path)
    (event,) = await _events(_trigger(checkpoints))
    assert isinstance(event, TaskFailedEvent)
    assert writing_saw_pushes == [True], "the run's record was written before any XCom went out"
    assert sorted(done) == ["record", "xcoms"]
