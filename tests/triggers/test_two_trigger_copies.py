"""Two live copies of one trigger end an attempt once (issue #33 item 10).

When a triggerer's loop is reported deadlocked its triggers are reassigned, and the old copy may still run:
Airflow 3.3 can run one trigger twice for a while (`Trigger.assign_unassigned` after a lapsed heartbeat; the old
runner cancels its copy only at its next `update_triggers`: airflow-core jobs/triggerer_job_runner.py@3.3.2). Both
copies see the same ended JobSet and both take the attempt-end path (triggers.attempt_end). Its write is a
compare-and-set of the run lock that closes only an open record (RunLock.close_attempt): the second copy changes
nothing, deletes nothing, and its event reaches a task instance no longer deferred on that trigger, which Airflow
ignores (models/trigger.py@3.3.2 `submit_event`/`submit_failure` select only DEFERRED task instances).
Over the in-memory cluster (its ConfigMap replace answers 409 on a stale resourceVersion, as the API server does:
https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions).
"""

from __future__ import annotations

import asyncio
import copy

import pytest
from airflow.triggers.base import TaskFailedEvent

from mtc_provider.adapters.run_lock import ATTEMPTS
from mtc_provider.triggers import attempt_end
from tests.triggers.test_js_attempt_end import _events, _setup, _trigger


@pytest.fixture(autouse=True)
def _airflow_honours_task_failed_retries(monkeypatch):
    monkeypatch.setattr(attempt_end, "supported", lambda: True)


async def test_a_second_copy_after_the_first_changes_nothing(cluster, tmp_path):
    lock, checkpoints = _setup(cluster, tmp_path)
    first = _trigger(checkpoints)
    (event,) = await _events(first)
    assert isinstance(event, TaskFailedEvent)
    closed = copy.deepcopy(lock.read()[ATTEMPTS])
    assert closed[0]["end"] is not None and closed[0]["outcome"] == "disrupted"
    # the moved copy: the same serialized trigger, rebuilt in another triggerer
    classpath, kwargs = first.serialize()
    second = type(first)(**kwargs)
    second.task_instance = first.task_instance
    await _events(second)
    assert lock.read()[ATTEMPTS] == closed  # the record closed once: same end time, outcome and reason
    assert cluster.deleted == []


async def test_two_copies_at_once_close_one_record_once(cluster, tmp_path):
    lock, checkpoints = _setup(cluster, tmp_path)
    a = _trigger(checkpoints)
    b = _trigger(checkpoints)
    results = await asyncio.gather(_events(a), _events(b))
    assert all(len(r) == 1 for r in results), results
    (record,) = lock.read()[ATTEMPTS]
    assert record["end"] is not None and record["outcome"] == "disrupted"
    assert cluster.deleted == []
