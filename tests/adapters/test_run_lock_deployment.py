"""The run lock records the Airflow deployment that wrote it (issue #33 item 7): a second deployment sharing a
namespace and a run name is refused, never taken over, and its teardown and release leave the lock alone.

Why: a deployment asks its own Airflow whether a lock's owner is gone, and about another deployment's task instance
its Airflow finds no row, which `owner_gone` rightly calls gone for its own runs (a deleted DAG run). The locks live in
the in-memory cluster (tests/doubles/memory_jobset.py), whose ConfigMaps keep data as the API server does.
"""

from __future__ import annotations

import pytest

from mtc_provider.adapters.run_lock import DEPLOYMENT, LockHeld, RunLock
from mtc_provider.core.basics import labels as L
from mtc_provider.core.attempt.ownership import TaskLookup, owner_gone
from tests.doubles.memory_jobset import MemoryJobSetApi, MemoryJobSetCluster

NS, RUN = "ml", "llama"
HOLDER = L.run_labels("train_dag", "scheduled__2026-03-01T00:00:00+00:00", "train", RUN)  # the same ids in both
OWNER = {"dag_id": "train_dag", "run_id": "scheduled__2026-03-01T00:00:00+00:00", "task_id": "train",
         "map_index": -1, "try_number": 1}


def _lock(api, deployment: str, holder=HOLDER, owner=OWNER) -> RunLock:
    return RunLock(api, NS, RUN, holder, owner, deployment=deployment)


def _always_gone(owner):
    return True, "the DAG run no longer exists"


@pytest.fixture
def api():
    return MemoryJobSetApi(MemoryJobSetCluster())


def test_another_deployments_lock_with_the_same_ids_is_not_ours(api):
    _lock(api, "http://airflow-a:8080/execution/").acquire()
    with pytest.raises(LockHeld, match=r"another Airflow deployment \(http://airflow-a:8080/execution/; this one "
                                       r"is http://airflow-b:8080/execution/\)"):
        _lock(api, "http://airflow-b:8080/execution/").acquire(owner_gone=_always_gone)


def test_another_deployments_lock_is_never_taken_over(api):
    first = _lock(api, "a")
    first.acquire()
    other = L.run_labels("other_dag", "manual__1", "train", RUN)
    with pytest.raises(LockHeld, match="another Airflow deployment"):
        _lock(api, "b", holder=other, owner={**OWNER, "dag_id": "other_dag"}).acquire(owner_gone=_always_gone)
    assert first.read()[DEPLOYMENT] == "a" and first.read()["owner"] == OWNER


def test_the_same_deployment_still_takes_over_a_gone_owner(api):
    _lock(api, "a").acquire()
    other = L.run_labels("other_dag", "manual__1", "train", RUN)
    newer = _lock(api, "a", holder=other, owner={**OWNER, "dag_id": "other_dag"})
    newer.acquire(owner_gone=_always_gone)
    assert newer.taken_over and newer.read()["holder"] == other


def test_release_and_teardown_leave_another_deployments_lock(api):
    _lock(api, "a").acquire()
    theirs = _lock(api, "b")
    assert "another Airflow deployment (a; this one is b)" in theirs.held_elsewhere()
    theirs.release()
    assert _lock(api, "a").read()[DEPLOYMENT] == "a"  # still there
    ours = _lock(api, "a")
    assert ours.held_elsewhere() == ""
    ours.release()
    assert ours.read()["holder"] == {}  # gone


def test_a_lock_from_before_deployments_is_this_deployments_and_gets_recorded(api):
    old = _lock(api, "a")
    old.acquire()
    body = api.get_lock(NS, old.name)
    del body["data"][DEPLOYMENT]  # as an older provider version wrote it
    api.replace_lock(NS, old.name, body)
    again = _lock(api, "b")
    again.acquire()
    assert again.read()[DEPLOYMENT] == "b"


@pytest.mark.parametrize("lookup, gone", [
    (None, False),  # Airflow could not be asked: unknown is never gone
    (TaskLookup(True, "up_for_retry"), False),  # its next try reattaches
    (TaskLookup(True, None), False),  # cleared: it runs again
    (TaskLookup(True, "deferred"), False), (TaskLookup(True, "running"), False),
    (TaskLookup(True, "queued"), False), (TaskLookup(True, "scheduled"), False),
    (TaskLookup(True, "up_for_reschedule"), False), (TaskLookup(True, "restarting"), False),
    (TaskLookup(True, "failed"), True), (TaskLookup(True, "success"), True), (TaskLookup(True, "skipped"), True),
    (TaskLookup(True, "upstream_failed"), True), (TaskLookup(True, "removed"), True),
    (TaskLookup(False), True),  # its DAG run was deleted
], ids=lambda v: repr(v) if not isinstance(v, bool) else "")
def test_owner_gone_over_every_state(lookup, gone):
    assert owner_gone(lookup, "DAG d, run r, task t, try 1", "ConnectError")[0] is gone


# --- the checkpoint claim: one writer per checkpoint directory, whatever the namespace --------------------------

CKPT = "gs://ckpt/out/llama/checkpoints"


def _launch(api, namespace: str, dag: str, checkpoint_dir: str, deployment: str = "a") -> RunLock:
    holder = L.run_labels(dag, "manual__1", "train", RUN)
    lock = RunLock(api, namespace, RUN, holder, {**OWNER, "dag_id": dag}, deployment=deployment,
                   claims_namespace="default")
    lock.acquire(owner_gone=lambda owner: (False, "its task instance is running"), checkpoint_dir=checkpoint_dir)
    return lock


def test_two_namespaces_one_checkpoint_directory_the_second_is_refused_naming_the_holder(api):
    _launch(api, "team-a", "dag_a", CKPT)
    with pytest.raises(LockHeld) as held:
        _launch(api, "team-b", "dag_b", "gs://ckpt//out/llama/checkpoints/")  # the same directory, spelled apart
    text = str(held.value)
    assert f"checkpoint directory {CKPT}" in text and "held by DAG dag_a" in text and "namespace team-a" in text, text
    assert "its task instance is running" in text
    assert held.value.directory == CKPT
    assert ("team-b", L.lock_name(RUN)) not in api.cluster.locks  # nothing left behind by the refused launch


def test_two_namespaces_two_checkpoint_directories_both_run(api):
    _launch(api, "team-a", "dag_a", CKPT)
    _launch(api, "team-b", "dag_b", "gs://ckpt/out/other/checkpoints")


def test_two_run_names_one_directory_in_one_namespace_are_refused_too(api):
    _launch(api, "ml", "dag_a", "/data/runs/llama")
    holder = L.run_labels("dag_b", "manual__1", "train", "other-name")
    with pytest.raises(LockHeld, match="checkpoint directory /data/runs/llama"):
        RunLock(api, "ml", "other-name", holder, OWNER, deployment="a", claims_namespace="default").acquire(
            checkpoint_dir="file:///data/runs/./llama/")


def test_another_deployments_claim_is_never_taken_over_and_unclaim_is_the_explicit_way(api):
    from mtc_provider.adapters.run_lock import unclaim

    _launch(api, "team-a", "dag_a", CKPT, deployment="a")
    with pytest.raises(LockHeld, match="another Airflow deployment"):
        holder = L.run_labels("dag_b", "manual__1", "train", RUN)
        RunLock(api, "team-b", RUN, holder, OWNER, deployment="b", claims_namespace="default").acquire(
            owner_gone=_always_gone, checkpoint_dir=CKPT)
    assert unclaim(api, CKPT, "default")["holder"][L.DAG_ID] == "dag_a"  # the user's explicit take-over
    _launch(api, "team-b", "dag_b", CKPT, deployment="b")


def test_the_claim_is_released_with_the_run_lock_and_by_mtc_unlock(api):
    from mtc_provider.adapters.run_lock import claim_name, unlock

    lock = _launch(api, "team-a", "dag_a", CKPT)
    assert ("default", claim_name(CKPT)) in api.cluster.locks
    assert lock.read()["claim"] == {"namespace": "default", "name": claim_name(CKPT)}
    lock.release()
    assert ("default", claim_name(CKPT)) not in api.cluster.locks
    _launch(api, "team-b", "dag_b", CKPT)
    unlock(api, "team-b", RUN)
    assert ("default", claim_name(CKPT)) not in api.cluster.locks


def test_a_retry_finds_its_own_claim(api):
    _launch(api, "team-a", "dag_a", CKPT)
    again = _launch(api, "team-a", "dag_a", CKPT)
    assert again.taken_over == "" and again.read()["claim"]["name"].startswith("mtc-ckpt-")


def test_normalized_directories():
    from mtc_provider.adapters.run_lock import claim_name, normalized_directory

    assert normalized_directory("gs://CKPT//a/b/") == "gs://ckpt/a/b"
    assert normalized_directory("file:///x/./y/") == "/x/y"
    assert claim_name("gs://ckpt/a/B") != claim_name("gs://ckpt/a/b")  # object names are case-sensitive
    assert len(claim_name("gs://ckpt/" + "x" * 500)) == 49
