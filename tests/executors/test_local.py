"""Which ends of task processes PreloadLocalExecutor reports (the rule of mtc_provider.executors.local), on its real
result queue and event buffer: the worker puts `(key, state, exception)` there when a workload ends
(airflow/executors/local_executor.py `_run_worker`), and the scheduler reads the event buffer. The processes and the
scheduler are real in tests/e2e/test_defer_race.py; here the counts the executor keeps when it hands workloads to
its workers are set as `_process_workloads` sets them.
"""

from __future__ import annotations

import multiprocessing
from collections import Counter

import pytest
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.utils.state import TaskInstanceState

from mtc_provider.executors.local import PreloadLocalExecutor

TRY_1 = TaskInstanceKey("dag", "train", "run", 1)
OTHER = TaskInstanceKey("dag", "other", "run", 1)


@pytest.fixture
def executor():
    ex = PreloadLocalExecutor(parallelism=2)
    ex.result_queue = multiprocessing.SimpleQueue()
    ex._in_flight = Counter()
    yield ex
    ex.result_queue.close()


def ends(executor, *results):
    for key, state in results:
        executor.result_queue.put((key, state, None))
    executor._read_results()
    return executor.get_event_buffer()


def test_the_deferring_process_end_is_not_reported_while_the_resumed_try_runs(executor):
    executor._in_flight.update([TRY_1, TRY_1, OTHER])  # try 1 deferred and resumed; another task runs
    assert ends(executor, (TRY_1, TaskInstanceState.SUCCESS)) == {}
    # the resumed try's own end is reported, with its state
    assert ends(executor, (TRY_1, TaskInstanceState.FAILED), (OTHER, TaskInstanceState.SUCCESS)) == {
        TRY_1: (TaskInstanceState.FAILED, None), OTHER: (TaskInstanceState.SUCCESS, None)}
    assert executor._in_flight == Counter()


def test_nor_while_the_resumed_try_waits_for_a_worker(executor):
    executor._in_flight.update([TRY_1])
    executor.queued_tasks[TRY_1] = object()  # queued by the scheduler, not yet handed to a worker
    assert ends(executor, (TRY_1, TaskInstanceState.SUCCESS)) == {}


def test_a_try_with_one_process_is_reported_at_its_end(executor):
    executor._in_flight.update([TRY_1])
    assert ends(executor, (TRY_1, TaskInstanceState.SUCCESS)) == {TRY_1: (TaskInstanceState.SUCCESS, None)}


def test_an_end_the_executor_did_not_count_is_reported(executor):
    # a callback's workload (keyed by its id, reported running then ended) and a task never counted: as Airflow's
    assert ends(executor, ("callback-1", "running"), (TRY_1, TaskInstanceState.SUCCESS)) == {
        "callback-1": ("running", None), TRY_1: (TaskInstanceState.SUCCESS, None)}


def test_on_an_airflow_that_counts_dispatches_itself_its_own_reading_applies(executor, monkeypatch):
    # Airflow 3.4's LocalExecutor keeps a resumed try's key running itself (local_executor.py `_finish_dispatch`)
    # and reads its results as (pid, key, state, exc): the executor must not read them as 3.3's
    from airflow.executors.local_executor import LocalExecutor

    from mtc_provider.executors import local

    read = []
    monkeypatch.setattr(local, "AIRFLOW_COUNTS_DISPATCHES", True)
    monkeypatch.setattr(LocalExecutor, "_read_results", lambda self: read.append(self))
    executor._in_flight.update([TRY_1, TRY_1])
    executor._read_results()
    assert read == [executor]
