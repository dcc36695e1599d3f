"""The hook as the launch operator's JobSet client (issue 36): an attempt submitted twice is reattached to, a name
held by another run is refused, a deletion is waited for within its bound, and the async twin reads the same state.

On the in-memory cluster (tests/doubles/memory_jobset.py): AlreadyExists for a name taken, foreground deletion that
keeps a deleted JobSet readable for `deletion_reads` reads (Kubernetes "Use Cascading Deletion").
"""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.core.basics import labels as L
from mtc_provider.hooks.jobset import MtcJobSetAsyncHook, MtcJobSetHook, StillTerminating
from tests.doubles.memory_jobset import status_failed, status_running
from tests.support.js_helpers import jobset_body

CONNECTION = {"kind": "local", "home": "/nonexistent/mtc-home"}
MINE = L.run_labels("dag", "run-1", "train", "llama")


def _body(name: str, labels: dict) -> dict:
    body = jobset_body(name, labels)
    body["metadata"]["namespace"] = "default"
    return body


def test_an_attempt_submitted_again_is_reattached_and_another_runs_name_is_refused(cluster):
    hook = MtcJobSetHook(connection=CONNECTION)
    first, created = hook.submit_attempt("default", "llama-a1", _body("llama-a1", MINE), MINE)
    again, created_again = hook.submit_attempt("default", "llama-a1", _body("llama-a1", MINE), MINE)
    assert (created, created_again) == (True, False) and again["metadata"]["name"] == first["metadata"]["name"]
    assert cluster.created == ["llama-a1"]
    other = L.run_labels("dag", "run-2", "train", "llama")
    with pytest.raises(AirflowFailException, match="JobSet name llama-a1 is taken by a JobSet of another run"):
        hook.submit_attempt("default", "llama-a1", _body("llama-a1", other), other)


def test_this_tasks_jobsets_refuse_a_live_one_of_another_dag_run(cluster):
    cluster.plan([status_failed()], [status_running()])
    hook = MtcJobSetHook(connection=CONNECTION)
    hook.api.create("default", _body("llama-a1", MINE))
    cluster.advance("default", "llama-a1")
    assert [o["metadata"]["name"] for o in hook.this_tasks_jobsets("default", "llama", MINE)] == ["llama-a1"]
    hook.api.create("default", _body("llama-other", L.run_labels("dag", "run-2", "train", "llama")))
    with pytest.raises(AirflowFailException, match="run_name 'llama' already has a live JobSet default/llama-other"):
        hook.this_tasks_jobsets("default", "llama", MINE)


def test_a_deletion_is_waited_for_within_its_bound(cluster):
    hook = MtcJobSetHook(connection=CONNECTION)
    hook.api.create("default", _body("llama-a1", MINE))
    cluster.deletion_reads = 3  # foreground deletion: readable until its pods are gone
    hook.delete("llama-a1", "default", reason="attempt-ended")
    hook.wait_for_deletion("default", ["llama-a1"], timeout=30, poll_interval=0)
    assert cluster.delete_reasons == [("llama-a1", "attempt-ended")] and "llama-a1" not in cluster.present()

    hook.api.create("default", _body("llama-a2", MINE))
    cluster.deletion_reads = 10_000
    hook.delete("llama-a2", "default", reason="attempt-ended")
    with pytest.raises(StillTerminating, match="JobSet default/llama-a2 is still terminating after 0s"):
        hook.wait_for_deletion("default", ["llama-a2"], timeout=0, poll_interval=0)


def test_the_async_twin_reads_what_the_sync_hook_submitted(cluster):
    cluster.plan([status_running()])
    MtcJobSetHook(connection=CONNECTION).api.create("default", _body("llama-a1", MINE))
    cluster.advance("default", "llama-a1")
    state = asyncio.run(MtcJobSetAsyncHook(CONNECTION, poll_interval=0).get_status("llama-a1", "default"))
    assert state.name == "llama-a1" and state.phase == "running"
    assert MtcJobSetAsyncHook(CONNECTION).sync_hook().connection == CONNECTION
