"""The training DAG's teardown rule in real Airflow (dag.test on SQLite; issue #33 item 3).

Airflow 3.3 gives a task marked `as_teardown(setups=X)` the trigger rule ALL_DONE_SETUP_SUCCESS: it runs once every
upstream task is done and at least one of its setups succeeded, else it is upstream_failed
(`airflow/ti_deps/deps/trigger_rule_dep.py`). With `train` as its only setup, a failed `train` left the teardown
upstream_failed and whatever `train` left running trained on, unwatched. The rule now:

- `train` failed for the run's own reasons (or its last try could not watch any more): the teardown deletes the
  run's JobSets and frees its run lock, logged as "the teardown after the run ended".
- `train` failed for the orchestrator's own trouble (it pushed `jobset_kept`): the teardown keeps the JobSet and the
  lock, and says how to reattach or stop it.
- `plan` failed: nothing was launched; the teardown is upstream_failed and touches no cluster.

`train` is replaced by a stand-in that creates its attempt's JobSet (as the real operator labels it) and fails, so
the test needs no JAX; the JobSets live in the in-memory cluster registered as the local target's API.
"""

from __future__ import annotations

import datetime as dt

import pytest

from mtc_provider.core.basics import labels as L
from mtc_provider.operators import jobset as jobset_ops
from tests.support.training_dag import load_training_dag
from tests.support.jobset_fixtures import cluster  # noqa: F401 - fixture
from tests.support.js_helpers import jobset_body

SKIPPED = r"^(readiness)$"  # marked success, not run (it would check a real cluster)
CONF = {"checkpointing": {"run_name": "teardown-run", "steps": 10}, "fault_plan": []}


@pytest.fixture
def training_dag(monkeypatch, tmp_path, airflow_db):
    return load_training_dag(monkeypatch, tmp_path, "mtc_training_dag_for_teardown")


def _failing_train(cluster, keep: bool, holds_lock: bool = False):
    """A `train` whose try leaves its attempt's JobSet running and fails (e.g. its last try lost the watch);
    `holds_lock`: it took the run lock and stopped without freeing it or recording `jobset_kept` (a worker killed)."""
    from airflow.sdk.exceptions import AirflowFailException

    def execute(self, context):
        ti = context["ti"]
        run_name = context["ti"].xcom_pull(task_ids="plan")["checkpointing"]["run_name"]
        labels = L.run_labels(ti.dag_id, ti.run_id, ti.task_id, run_name)
        cluster.create("default", jobset_body(f"{run_name}-try1", labels=labels))
        if holds_lock:
            from mtc_provider.hooks.jobset import MtcJobSetHook

            MtcJobSetHook(connection=self._connection()).run_lock("default", run_name, labels).acquire()
        if keep:
            ti.xcom_push(key=jobset_ops.JOBSET_KEPT_XCOM_KEY, value={"reason": "the Kubernetes API answered 403"})
        raise AirflowFailException("the try could not go on")

    return execute


def _states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


@pytest.mark.parametrize("keep, holds_lock", [(False, False), (True, False), (False, True)],
                         ids=["run-failed", "orchestrator-kept", "lock-still-held"])
def test_a_failed_train_is_followed_by_the_teardown(training_dag, cluster, monkeypatch, capfd, keep,  # noqa: F811
                                                    holds_lock):
    monkeypatch.setattr(jobset_ops.MtcJobSetOperator, "execute", _failing_train(cluster, keep, holds_lock))
    day = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    run = training_dag.test(logical_date=day, run_after=day, run_conf=CONF, mark_success_pattern=SKIPPED)
    log = "".join(capfd.readouterr())  # dag.test prints the task logs (Airflow's structlog) to the console
    states = _states(run)
    assert states["train"] == "failed" and states["teardown"] == "success", states
    assert run.state == "failed"  # the run's outcome is train's, not the teardown's
    if keep:
        assert cluster.live() == ["teardown-run-try1"]
        assert "teardown keeps the JobSets of run teardown-run" in log
    elif holds_lock:  # no jobset_kept, but the lock says the run did not end: nothing deleted, the lock kept
        assert cluster.live() == ["teardown-run-try1"] and cluster.locks
        assert "teardown keeps the live JobSets teardown-run-try1 of run teardown-run" in log
    else:
        assert cluster.live() == [] and cluster.terminating() == ["teardown-run-try1"]  # a foreground delete
        assert "the teardown after the run ended (task train is done" in log


def test_a_failed_plan_launches_nothing_and_the_teardown_touches_no_cluster(training_dag, cluster, monkeypatch):  # noqa: F811
    def no_cluster(*args, **kwargs):
        raise AssertionError("the teardown reached a cluster after a failed plan")

    monkeypatch.setattr(jobset_ops.MtcDeleteJobSetOperator, "execute", no_cluster)
    day = dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc)
    bad = {**CONF, "checkpointing": {**CONF["checkpointing"], "steps": -1}}  # refused by the plan
    run = training_dag.test(logical_date=day, run_after=day, run_conf=bad, mark_success_pattern=SKIPPED)
    states = _states(run)
    assert states["plan"] == "failed" and states["teardown"] == "upstream_failed", states
