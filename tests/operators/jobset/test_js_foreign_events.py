"""An event or a failure Airflow resumes a try with, that is not of that try's trigger, never ends its attempt.

The benchmark's symptom (resub_preload, one run in ten): try 1 deferred on a healthy JobSet and was resumed (state
`scheduled`, no `deferred` seen) within half a second, far sooner than the triggerer could have started its trigger
and reported from it (its runner syncs with its supervisor about once a second: airflow-core
jobs/triggerer_job_runner.py@3.3.2 `TriggerRunner.arun`), and the try failed, spending the only retry. Airflow keys
triggers by id (`TriggerRunnerSupervisor.update_triggers`, its events and failures), resumes whatever task instance is
deferred on an id when that id's event or failure arrives (models/trigger.py@3.3.2 `Trigger.submit_event`,
`submit_failure`), and on SQLite the id is a rowid without AUTOINCREMENT, so the next trigger reuses the id of the
newest one deleted (with one deferred task at a time, nearly every trigger is id 1): the previous run's trigger's
late event or failure resumes the next try. The last test shows that reuse on this session's Airflow database.
"""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider.core.attempt.jobset_events import DELETED, ERROR, JobSetEvent
from mtc_provider.operators.jobset import JobSetAttemptFailed, MAX_WATCH_FAILURES
from tests.doubles.memory_jobset import status_failed, status_running
from tests.support.js_helpers import FakeTI, launch, run_try


def _deferred(tmp_path, run: str, ti: FakeTI):
    """A deferrable try of run `run` (its own run name and JobSet name): the trigger it deferred on."""
    op = launch(str(tmp_path), deferrable=True,
                checkpointing={"run_name": run, "base_output_directory": f"{tmp_path}/out", "steps": 100,
                               "checkpoint_period": 20},
                workload={"jobset_name": run, "max_restarts": 2})
    with pytest.raises(TaskDeferred) as deferred:
        run_try(op, ti)
    return deferred.value.trigger


def _resumed(tmp_path, run: str):
    """A fresh operator of run `run`, as the worker that resumes a deferred try builds it."""
    return launch(str(tmp_path), deferrable=True,
                  checkpointing={"run_name": run, "base_output_directory": f"{tmp_path}/out", "steps": 100,
                                 "checkpoint_period": 20},
                  workload={"jobset_name": run, "max_restarts": 2})


def _event(trigger, kind: str, message: str = "") -> dict:
    return JobSetEvent(kind, trigger.namespace, trigger.name, None, 0, message, trigger.extra).to_payload()


@pytest.mark.parametrize("kind", [ERROR, DELETED])
def test_an_event_of_another_runs_trigger_does_not_end_this_try(cluster, tmp_path, kind):
    cluster.plan([status_running()], [status_running()])
    earlier = _deferred(tmp_path, "prel1", FakeTI(run_id="prel1"))
    ti = FakeTI(run_id="prel2")
    mine = _deferred(tmp_path, "prel2", ti)
    # The previous run's trigger reports the end of its JobSet (deleted by the teardown, or a lost watch) late, on
    # the trigger id this try's deferral reused: Airflow resumes this try with it.
    with pytest.raises(TaskDeferred) as again:
        _resumed(tmp_path, "prel2").execute_complete({"ti": ti, "run_id": ti.run_id},
                                                     _event(earlier, kind, "watch lost"))
    assert again.value.trigger.name == mine.name  # this try's own JobSet, watched again
    assert cluster.deleted == [] and sorted(cluster.live()) == sorted(cluster.created)
    run_locks = [name for _, name in cluster.locks if name.startswith("mtc-run-")]  # beside them: the directory claims
    assert len(cluster.created) == 2 and len(run_locks) == 2  # no second JobSet, both run names still held


def test_a_late_event_of_this_tasks_earlier_try_does_not_end_the_next_try(cluster, tmp_path):
    cluster.plan([status_running()])
    first = _deferred(tmp_path, "prel1", FakeTI(run_id="prel1", try_number=1))
    ti = FakeTI(run_id="prel1", try_number=2)
    with pytest.raises(TaskDeferred) as again:  # try 2 reattaches to the live JobSet of try 1 ...
        _resumed(tmp_path, "prel1").execute_complete({"ti": ti, "run_id": ti.run_id}, _event(first, ERROR, "x"))
    assert again.value.trigger.name == first.name and again.value.trigger.extra["owner"]["try_number"] == 2
    assert cluster.deleted == [] and len(cluster.created) == 1


def test_when_this_tries_jobset_ended_meanwhile_its_end_decides_and_nothing_is_resubmitted(cluster, tmp_path):
    """The foreign event took the place of this try's own trigger, which never ran: watching again finds the
    attempt ended (a retryable failure), and that end decides the try, as its own event would have."""
    cluster.plan([status_running()], [status_running(), status_failed()])
    earlier = _deferred(tmp_path, "prel1", FakeTI(run_id="prel1"))
    ti = FakeTI(run_id="prel2")
    mine = _deferred(tmp_path, "prel2", ti)
    cluster.advance("default", mine.name)  # running ...
    cluster.advance("default", mine.name)  # ... Failed
    with pytest.raises(JobSetAttemptFailed, match="resubmitting .try 2"):
        _resumed(tmp_path, "prel2").execute_complete({"ti": ti, "run_id": ti.run_id}, _event(earlier, DELETED))
    assert cluster.deleted == [] and len(cluster.created) == 2  # kept for the next try, which deletes it


def test_this_tries_own_error_event_still_ends_it(cluster, tmp_path):
    cluster.plan([status_running()])
    ti = FakeTI(run_id="prel2")
    mine = _deferred(tmp_path, "prel2", ti)
    with pytest.raises(JobSetAttemptFailed, match="lost track"):
        _resumed(tmp_path, "prel2").execute_complete({"ti": ti, "run_id": ti.run_id}, _event(mine, ERROR, "x"))


def test_an_event_naming_no_owner_is_this_tries(cluster, tmp_path):
    """A trigger serialized by an earlier provider version echoes no owner: its event counts, as before."""
    cluster.plan([status_running()])
    ti = FakeTI(run_id="prel2")
    mine = _deferred(tmp_path, "prel2", ti)
    payload = _event(mine, ERROR, "x")
    del payload["extra"]["owner"]
    with pytest.raises(JobSetAttemptFailed, match="lost track"):
        _resumed(tmp_path, "prel2").execute_complete({"ti": ti, "run_id": ti.run_id}, payload)


def test_a_failed_trigger_watches_the_jobset_again_a_bounded_number_of_times(cluster, tmp_path):
    from airflow.sdk.exceptions import TaskDeferralError

    cluster.plan([status_running()])
    ti = FakeTI(run_id="prel2")
    mine = _deferred(tmp_path, "prel2", ti)
    failed = {"error": "Trigger failure", "traceback": ["Traceback (most recent call last):\n", "RuntimeError: x\n"]}
    for _ in range(MAX_WATCH_FAILURES):
        with pytest.raises(TaskDeferred) as again:
            _resumed(tmp_path, "prel2").resume_execution("__fail__", dict(failed), {"ti": ti, "run_id": ti.run_id})
        assert again.value.trigger.name == mine.name
    with pytest.raises(TaskDeferralError):  # a trigger that keeps failing: Airflow's own handling ends the try
        _resumed(tmp_path, "prel2").resume_execution("__fail__", dict(failed), {"ti": ti, "run_id": ti.run_id})
    assert cluster.deleted == [] and len(cluster.created) == 1


def test_a_trigger_timeout_is_airflows_to_handle(cluster, tmp_path):
    from airflow.sdk.exceptions import TaskDeferralTimeout

    cluster.plan([status_running()])
    ti = FakeTI(run_id="prel2")
    _deferred(tmp_path, "prel2", ti)
    with pytest.raises(TaskDeferralTimeout):
        _resumed(tmp_path, "prel2").resume_execution("__fail__", {"error": "Trigger timeout"},
                                                     {"ti": ti, "run_id": ti.run_id})


def test_airflow_on_sqlite_resumes_the_next_deferred_task_with_a_deleted_triggers_event(airflow_db, monkeypatch,
                                                                                         tmp_path):
    """The mechanism, on this session's Airflow database: the trigger of a task marked failed is cleaned up, the
    next deferral's trigger gets its id, and that id's late event resumes the new task instance."""
    import datetime as dt

    from airflow.models.trigger import Trigger
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session

    from tests.support.jobset_fixtures import load_bundle_dags
    from tests.support.js_airflow_db import make_dag_run

    load_bundle_dags(monkeypatch, tmp_path, "mtc_jobset_dags.py")
    day = dt.datetime(2026, 4, 1, tzinfo=dt.timezone.utc)
    # Earlier tests' unused triggers go first, by Airflow's own clean-up (which keeps an AssetWatcher's): the one
    # below is then the only trigger the clean-up after "Mark failed" deletes, so the next id is exactly its id.
    Trigger.clean_unused()
    with create_session() as session:
        first = make_dag_run(session, "mtc_retry_deferrable", day, state="deferred")
        second = make_dag_run(session, "mtc_retry_deferrable", day + dt.timedelta(days=1), state="running")
        # The newest trigger (the largest rowid): deleted, its id is the next one's. Triggers still in use stay,
        # with smaller ids.
        old = Trigger(classpath="mtc_provider.triggers.jobset.JobSetTrigger", kwargs={})
        session.add(old)
        session.flush()
        first.trigger_id, old_id = old.id, old.id
        session.merge(first)
        session.commit()
    with create_session() as session:  # "Mark failed" on the deferred task; the triggerer's clean-up follows
        first = session.merge(first)
        first.state = "failed"
        session.commit()
    Trigger.clean_unused()
    with create_session() as session:  # the next task defers
        new = Trigger(classpath="mtc_provider.triggers.jobset.JobSetTrigger", kwargs={})
        session.add(new)
        session.flush()
        second = session.merge(second)
        second.trigger_id, second.state, second.next_method = new.id, "deferred", "execute_complete"
        session.commit()
        assert new.id == old_id  # SQLite reused the deleted trigger's id
    Trigger.submit_event(old_id, TriggerEvent({"kind": "deleted", "name": "the first run's JobSet"}))
    with create_session() as session:
        second = session.merge(second)
        session.refresh(second)
        assert second.state == "scheduled"  # resumed with the first run's event
