"""A stall after progress followed in the same try by the trigger itself (triggers.stall_end): attempt 1 is closed
with the stall as its interruption, deleted (foreground) and waited for until it is gone, then attempt 2 is created
and followed; the worker resumes once, at the try's end. A triggerer restart or a second live copy between the
steps finishes them; a delete the API refuses hands the task to a worker, which deletes and submits.

Over the in-memory JobSet cluster (tests/doubles/memory_jobset.py: foreground deletion keeps the JobSet readable with
its deletionTimestamp until its pods are gone, a create of a taken name answers 409, as the API server does:
https://kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion); checkpoints are real
folders; the trigger's XComs go through the triggerer's comms (tests/triggers/test_next_in_try.py `Run`).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider.adapters.retry import Retryable
from mtc_provider.core.attempt import ledger as L
from mtc_provider.core.attempt.jobset_events import ENDED, STALLED, JobSetEvent
from mtc_provider.core.basics.vocabulary import DELETE_ATTEMPT_FAILED
from mtc_provider.triggers import stall_end
from tests.doubles.memory_jobset import status_completed, status_running
from tests.operators.jobset.test_js_one_attempt_end import _ledger_facts, _same_place, _times_as_set
from tests.support.js_helpers import reach
from tests.triggers.test_next_in_try import Run, TriggererStopped, _said

pytestmark = pytest.mark.timeout(120)

STALL = {"stall_timeout": 0.3, "poll_interval": 0.01}


def _stall_limit(kwargs, seconds: float) -> dict:
    """A rebuilt trigger's kwargs with another stall limit (its `watch` record as serialized)."""
    return {**kwargs, "watch": {**kwargs["watch"], "stall_timeout": seconds}}


def _hangs(seconds: float = 0.01):
    def frame(obj):
        time.sleep(seconds)  # the JobSet runs on, its status unchanged: no step, no checkpoint
        return status_running()
    return frame


def _stalled_then_target(tmp_path):
    """Attempt 1 saves step 40 (from 10), then hangs; attempt 2 reaches the target."""
    return ([status_running(), reach(tmp_path, 40, status_running())] + [_hangs()] * 2000,
            [status_running(), reach(tmp_path, 100, status_completed())])


@pytest.fixture
def run(tmp_path, monkeypatch):
    made = []

    def make(scripts=None, path=None, **overrides):
        path = path or tmp_path
        made.append(Run(path, monkeypatch, scripts or _stalled_then_target(path), **{**STALL, **overrides}))
        return made[-1]
    yield make
    for r in made:
        r.close()


def _present_at_creates(r):
    """What the cluster held at each create after this call (attempt 2 must see attempt 1 gone)."""
    seen, real = [], r.cluster.create

    def create(namespace, body):
        seen.append(list(r.cluster.present()))
        return real(namespace, body)

    r.cluster.create = create
    return seen


def test_a_stall_after_progress_is_followed_by_the_trigger_without_a_worker(run, caplog, capsys):
    r = run()
    r.cluster.deletion_reads = 200  # the pods' grace period, long enough that a create without the wait sees it
    trigger = r.defer()
    at_create = _present_at_creates(r)
    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed", ev
    assert ev.extra["history"] == [10, 40]
    first, second = r.cluster.created
    assert at_create == [[]]  # attempt 1 was gone (its pods with it) before attempt 2 was created
    assert r.cluster.delete_reasons == [(first, DELETE_ATTEMPT_FAILED)]
    said = _said(capsys, caplog)
    assert any(f"deleting stalled JobSet default/{first}" in m and "asked by the attempt's own end (stalled: no new "
               "finalized checkpoint" in m and "trigger of try 1" in m for m in said), said
    assert r.completions == 0
    result = r.complete(event)  # the worker, once, at the try's end
    assert r.completions == 1 and result["attempt"] == 2 and result["last_step"] == 100
    attempts = r.xcoms()["attempts"]
    assert [(a["attempt"], a["try"], a["outcome"], a["last_step"], a.get("in_try")) for a in attempts] == [
        (1, 1, "disrupted", 40, True), (2, 1, "finished", 100, None)], attempts
    ledger = L.RunLedger.from_dict(r.xcoms()["ledger"])
    assert [(i.attempt, i.kind) for i in ledger.interruptions] == [(1, L.STALL)]
    assert [(d.attempt, d.kind) for d in ledger.decisions] == [(1, L.NEXT_ATTEMPT_IN_TRY), (2, "succeed")]


def test_the_records_are_those_of_the_workers_stall_path(run, tmp_path_factory):
    """One decision: the same records, ledger facts and XComs whether the worker or the trigger follows the stall."""
    seen = {}
    for in_trigger in (False, True):
        path = tmp_path_factory.mktemp(f"in-trigger-{in_trigger}")
        r = run(path=path, next_attempt_in_trigger=in_trigger)
        (event,) = asyncio.run(r.events(r.defer()))
        if not in_trigger:  # the worker deletes attempt 1, submits attempt 2 and defers again
            assert JobSetEvent.from_payload(event.payload).kind == STALLED
            with pytest.raises(TaskDeferred) as deferred:
                r.complete(event)
            nxt = deferred.value.trigger
            nxt.task_instance = r.ti
            (event,) = asyncio.run(r.events(nxt))
        result = r.complete(event)
        seen[in_trigger] = (result, _same_place(r.xcoms(), path), list(r.cluster.created), r.completions,
                            list(r.cluster.delete_reasons))
    (w_result, w_xcoms, w_created, w_completions, w_deleted) = seen[False]
    (t_result, t_xcoms, t_created, t_completions, t_deleted) = seen[True]
    assert (w_completions, t_completions) == (2, 1)
    assert w_result == t_result and w_created == t_created and w_deleted == t_deleted
    assert _times_as_set(w_xcoms["attempts"]) == _times_as_set(t_xcoms["attempts"])
    assert _ledger_facts(w_xcoms["ledger"]) == _ledger_facts(t_xcoms["ledger"])


def test_a_stall_without_progress_still_goes_to_a_worker(run, tmp_path):
    """No restorable progress in the stalled attempt: an Airflow retry (the worker's), nothing deleted here."""
    r = run([[status_running()] + [_hangs()] * 2000, [status_running()]])
    (event,) = asyncio.run(r.events(r.defer()))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == STALLED and ev.extra["attempt"] == 1, ev
    assert len(r.cluster.created) == 1 and r.cluster.deleted == []
    assert all(a["end"] is None for a in r.comms.xcoms.get("attempts", [{"end": None}]))


def test_a_delete_the_api_refuses_hands_the_try_to_a_worker_that_deletes_and_submits(run, monkeypatch, caplog,
                                                                                      capsys):
    """The API answering 503 to the trigger's delete for longer than its budget: the stall's event goes to a worker
    (attempt 1's record stays closed, its facts are not added twice), which deletes attempt 1 and submits 2."""
    monkeypatch.setattr(stall_end, "DELETE_BUDGET_S", 0.3)
    r = run()
    trigger = r.defer()
    real_delete, refused = r.cluster.delete, []

    def delete(namespace, name, reason="unspecified"):  # the adapter maps a 503 to Retryable (adapters.retry)
        if r.completions == 0:  # until the worker resumes
            refused.append(name)
            raise Retryable(503, "the server is currently unable to handle the request", "ServiceUnavailable")
        return real_delete(namespace, name, reason)

    r.cluster.delete = delete
    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == STALLED and ev.extra["attempt"] == 1, ev
    assert ev.message.startswith("stalled: no new finalized checkpoint") and "could not delete JobSet" in ev.message
    assert refused and len(r.cluster.created) == 1 and r.cluster.deleted == []
    closed = [a for a in r.comms.xcoms["attempts"] if a["end"] is not None]
    assert [(a["attempt"], a["in_try"]) for a in closed] == [(1, True)]
    assert any("could not delete stalled JobSet" in m and "resumes on a worker" in m for m in _said(capsys, caplog))
    with pytest.raises(TaskDeferred) as deferred:  # the worker deletes attempt 1, waits for it, submits attempt 2
        r.complete(event)
    first, second = r.cluster.created
    assert r.cluster.delete_reasons == [(first, DELETE_ATTEMPT_FAILED)] and first not in r.cluster.present()
    nxt = deferred.value.trigger
    nxt.task_instance = r.ti
    (event,) = asyncio.run(r.events(nxt))
    assert r.complete(event)["attempt"] == 2
    attempts = r.xcoms()["attempts"]
    assert [(a["attempt"], a["outcome"], a["end"] == closed[0]["end"]) for a in attempts] == [
        (1, "disrupted", True), (2, "finished", False)]
    ledger = L.RunLedger.from_dict(r.xcoms()["ledger"])
    assert [(i.attempt, i.kind) for i in ledger.interruptions] == [(1, L.STALL)]
    assert [d.kind for d in ledger.decisions] == [L.NEXT_ATTEMPT_IN_TRY, "succeed"]


@pytest.mark.parametrize("stop_at", ["delete", "create"])
def test_a_triggerer_restart_between_the_steps_finishes_them_once(run, monkeypatch, caplog, capsys, stop_at):
    """The triggerer stops after attempt 1's record was closed and before its delete (`delete`), or after attempt 1
    was deleted and gone and before attempt 2 existed (`create`): the trigger rebuilt from attempt 1's kwargs finds
    the record closed in this try and attempt 1 not ended, and finishes the steps, at once (no second stall wait),
    deciding nothing again."""
    from mtc_provider.hooks.jobset import MtcJobSetHook

    r = run()
    trigger = r.defer()
    classpath, kwargs = trigger.serialize()
    real_delete, real_submit = stall_end.delete_stalled, MtcJobSetHook.submit_attempt

    async def stop_before_delete(*args, **kw):
        raise TriggererStopped()

    def stop_before_create(self, *args, **kw):
        raise TriggererStopped()

    if stop_at == "delete":
        monkeypatch.setattr(stall_end, "delete_stalled", stop_before_delete)
    else:
        monkeypatch.setattr(MtcJobSetHook, "submit_attempt", stop_before_create)
    with pytest.raises(TriggererStopped):
        asyncio.run(r.events(trigger))
    first = r.cluster.created[0]
    closed = [a for a in r.comms.xcoms["attempts"] if a["end"] is not None]
    assert [(a["attempt"], a["in_try"]) for a in closed] == [(1, True)] and len(r.cluster.created) == 1
    assert (first in r.cluster.live()) == (stop_at == "delete") and (first in r.cluster.present()) == (
        stop_at == "delete")
    monkeypatch.setattr(stall_end, "delete_stalled", real_delete)
    monkeypatch.setattr(MtcJobSetHook, "submit_attempt", real_submit)
    rebuilt = type(trigger)(**_stall_limit(kwargs, 3600.0))  # a second stall wait would time the test out
    rebuilt.task_instance = r.ti
    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(r.events(rebuilt))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed", ev
    assert len(r.cluster.created) == 2 and first not in r.cluster.present()
    assert any("was closed in this try after it stalled" in m for m in _said(capsys, caplog))
    assert r.complete(event)["attempt"] == 2
    attempts = r.xcoms()["attempts"]
    assert [(a["attempt"], a["end"] == closed[0]["end"]) for a in attempts] == [(1, True), (2, False)]
    assert [d.kind for d in L.RunLedger.from_dict(r.xcoms()["ledger"]).decisions] == [
        L.NEXT_ATTEMPT_IN_TRY, "succeed"]


@pytest.mark.parametrize("second_stall_timeout", [3600.0, STALL["stall_timeout"]])
def test_two_live_copies_create_one_next_attempt_after_a_stall(run, second_stall_timeout):
    """Two live copies of the trigger. With a long stall limit the second never judges the stall: it sees attempt 1
    deleted before attempt 2 exists (the window between the delete and the create) and must not call it "deleted
    outside this task", which would fail the run. With the same limit both judge it: one closes the record, both
    delete and wait, one create answers 409 and is followed. Either way one attempt 2, decided once."""
    r = run()
    first = r.defer()
    classpath, kwargs = first.serialize()
    second = type(first)(**_stall_limit(kwargs, second_stall_timeout))
    second.task_instance = r.ti

    async def both():
        return await asyncio.gather(r.events(first), r.events(second))

    results = asyncio.run(both())
    evs = [JobSetEvent.from_payload(events[0].payload) for events in results]
    assert [(e.kind, e.extra["attempt"], e.verdict["kind"]) for e in evs] == [(ENDED, 2, "succeed")] * 2, evs
    assert len(r.cluster.created) == 2
    ledger = L.RunLedger.from_dict(r.comms.xcoms["ledger"])
    assert [d.attempt for d in ledger.decisions if d.kind == L.NEXT_ATTEMPT_IN_TRY] == [1]
    assert r.complete(results[0][0])["attempt"] == 2


def test_new_pods_that_never_start_after_progress_are_followed_by_the_trigger(run, tmp_path):
    """A host lost after step 40, the JobSet restarts in the cluster, and the new pods never become ready (a new node
    whose ramdisk never mounts stays Pending): after startup_timeout that start is an interruption (`startup-timeout`
    in the ledger), followed in the same try by the trigger, as the worker follows it
    (tests/operators/jobset/test_js_gke_semantics.py)."""
    from tests.doubles.memory_jobset import pod_unschedulable
    from tests.operators.jobset.test_js_gke_semantics import _restarted_pending

    def restarted_never_ready(obj):
        r.cluster.set_pods("default", obj["metadata"]["name"], [pod_unschedulable(obj["metadata"]["name"], i)
                                                                for i in range(2)])
        return _restarted_pending()

    r = run([[status_running(), reach(tmp_path, 40, status_running()), restarted_never_ready]
             + [_restarted_pending()] * 2000,
             [status_running(), reach(tmp_path, 100, status_completed())]],
            stall_timeout=3600, startup_timeout=0.5)
    (event,) = asyncio.run(r.events(r.defer()))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed", ev
    first, second = r.cluster.created
    assert r.cluster.delete_reasons == [(first, DELETE_ATTEMPT_FAILED)] and r.completions == 0
    assert r.complete(event)["attempt"] == 2
    (one, two) = r.xcoms()["attempts"]
    assert (one["outcome"], one["in_try"], one["restarts"]) == ("disrupted", True, 1), one
    assert "did not start within startup_timeout" in one["reason"], one
    ledger = L.RunLedger.from_dict(r.xcoms()["ledger"])
    assert [(i.attempt, i.kind) for i in ledger.interruptions if i.restart is None] == [(1, L.STARTUP_TIMEOUT)]


def test_a_jobset_still_terminating_after_deletion_timeout_hands_the_try_to_a_worker(run):
    """Pods that do not go (a finalizer, a node that stopped answering): after the operator's deletion_timeout the
    trigger creates nothing and hands the stall to a worker, which waits for the JobSet as it does for any."""
    r = run(deletion_timeout=0.5)
    r.cluster.deletion_reads = 10**9  # never gone
    trigger = r.defer()
    assert trigger.watch.times.deletion_timeout == 0.5
    (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == STALLED and "could not delete JobSet" in ev.message and "still terminating after" in ev.message
    first = r.cluster.created[0]
    assert r.cluster.created == [first] and r.cluster.terminating() == [first]
    assert [(a["attempt"], a["in_try"]) for a in r.comms.xcoms["attempts"] if a["end"] is not None] == [(1, True)]
