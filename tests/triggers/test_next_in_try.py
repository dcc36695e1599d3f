"""The next attempt of a try submitted from the triggerer (issue 43, first item; triggers.next_in_try).

The launch operator, deferrable and allowed (`next_attempt_in_trigger=True`), defers with the body of its attempt
rendered in advance; the trigger, holding the task instance as in the triggerer, decides the end of attempt N
once, closes its record, creates attempt N+1 (`<jobset>-<hash>-a<N+1>`), opens its record, deletes N and watches
N+1 in the same run. The worker's `execute_complete` is entered once, at the try's end.

Over the in-memory JobSet cluster (tests/doubles/memory_jobset.py: a create of a taken name answers 409
AlreadyExists, a ConfigMap replace on a stale resourceVersion 409 Conflict, foreground deletion, as the API
server does: https://kubernetes.io/docs/reference/using-api/api-concepts/); checkpoints are real folders; the
trigger's XComs go through the triggerer's comms (`asend(SetXCom)`, recorded as in test_js_one_attempt_end.py).
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from airflow.sdk.exceptions import TaskDeferred

from mtc_provider import targets
from mtc_provider.adapters.protocols import ApiError
from mtc_provider.adapters.retry import Retryable
from mtc_provider.core.attempt.jobset_events import ENDED, NEXT_ATTEMPT_PENDING, JobSetEvent
from mtc_provider.core.attempt.run_summary import RECORD_FILE
from mtc_provider.core.basics.vocabulary import DELETE_ATTEMPT_ENDED
from mtc_provider.triggers import next_in_try
from tests.doubles.memory_jobset import (AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster,
                                         status_completed, status_failed, status_running)
from tests.operators.jobset.test_js_one_attempt_end import (RecordingComms, _ledger_facts, _same_place,
                                                            _times_as_set)
from tests.support.js_helpers import FakeTI, ckpt_dir, finalize, launch, reach

pytestmark = pytest.mark.timeout(120)


def _preempted_then_target(tmp_path):
    """Attempt 1 is preempted after progress (10 -> 40: completed below target), attempt 2 reaches the target."""
    return ([status_running(), reach(tmp_path, 40, status_completed())],
            [status_running(), reach(tmp_path, 100, status_completed())])


class Run:
    """One try of the launch operator on its own in-memory cluster, its trigger run as the triggerer runs it."""

    def __init__(self, tmp_path, monkeypatch, scripts, **overrides):
        from airflow.sdk.execution_time import task_runner

        self.tmp_path = tmp_path
        self.comms = RecordingComms()
        monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", self.comms, raising=False)
        self.cluster = MemoryJobSetCluster()
        self.cluster.plan(*scripts)
        finalize(ckpt_dir(tmp_path), 10)  # the run resumes at step 10
        self.ti = FakeTI(try_number=1, max_tries=6)
        self.context = {"ti": self.ti, "run_id": self.ti.run_id}
        self.op = launch(str(tmp_path), deferrable=True, **{"next_attempt_in_trigger": True, **overrides})
        self.completions = 0
        self._registered = targets.registered_jobset_api("local", lambda c: MemoryJobSetApi(self.cluster),
                                                         lambda c: AsyncMemoryJobSetApi(self.cluster))
        self._registered.__enter__()

    def close(self):
        self._registered.__exit__(None, None, None)

    def defer(self):
        """The try's launch, to its deferral: the trigger, holding the task instance (the triggerer's)."""
        with pytest.raises(TaskDeferred) as deferred:
            self.op.execute(self.context)
        trigger = deferred.value.trigger
        trigger.task_instance = self.ti
        return trigger

    async def events(self, trigger):
        return [event async for event in trigger.run()]

    def complete(self, event):
        """The worker's resume with the trigger's event (counted)."""
        self.completions += 1
        return self.op.execute_complete(self.context, event.payload)

    def xcoms(self):
        return {**self.comms.xcoms, **self.ti.xcoms}  # the worker's pushes (at the try's end) are the newest

    def record(self):
        return json.loads((self.tmp_path / "out" / "llama" / RECORD_FILE).read_text())


def _said(capsys, caplog) -> list[str]:
    """The log lines (Airflow's structlog renders to the output; plain logging records land in caplog)."""
    return capsys.readouterr().out.splitlines() + [rec.getMessage() for rec in caplog.records]


@pytest.fixture
def run(tmp_path, monkeypatch):
    made = []

    def make(scripts=None, path=None, **overrides):
        made.append(Run(path or tmp_path, monkeypatch, scripts or _preempted_then_target(path or tmp_path),
                        **overrides))
        return made[-1]
    yield make
    for r in made:
        r.close()


def test_a_preemption_with_progress_is_followed_by_the_trigger_to_success(run, caplog, capsys):
    """(a) No worker between the attempts: the trigger creates attempt 2 and follows it; the worker resumes once."""
    r = run()
    trigger = r.defer()
    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.verdict["kind"] == "succeed" and ev.extra["attempt"] == 2
    assert ev.extra["history"] == [10, 40]  # attempt 2 started from the step attempt 1 reached
    first, second = r.cluster.created
    assert first.endswith("-a1") and second.endswith("-a2")
    # attempt 1 deleted after attempt 2 was created, with who asked
    assert r.cluster.delete_reasons == [(first, DELETE_ATTEMPT_ENDED)]
    said = _said(capsys, caplog)
    assert any(f"deleting ended JobSet default/{first}" in m and "asked by the attempt's own end, trigger of try 1"
               in m for m in said), said
    result = r.complete(event)
    assert r.completions == 1 and result["last_step"] == 100 and result["attempt"] == 2
    attempts = r.xcoms()["attempts"]
    assert [(a["attempt"], a["outcome"], a["last_step"], a.get("in_try")) for a in attempts] == [
        (1, "disrupted", 40, True), (2, "finished", 100, None)]
    assert r.record()["state"] == "succeeded"


def test_the_decision_and_records_are_the_worker_s(run, tmp_path_factory):
    """(e) One decision: the same records, ledger facts, XComs and run record as when the worker submits attempt 2."""
    seen = {}
    for in_trigger in (False, True):
        path = tmp_path_factory.mktemp(f"in-trigger-{in_trigger}")
        r = run(path=path, next_attempt_in_trigger=in_trigger)
        trigger = r.defer()
        (event,) = asyncio.run(r.events(trigger))
        if not in_trigger:  # the worker submits attempt 2 and defers again; its trigger runs to the end
            with pytest.raises(TaskDeferred) as deferred:
                r.complete(event)
            (event,) = asyncio.run(r.events(deferred.value.trigger))
        result = r.complete(event)
        xcoms = _same_place(r.xcoms(), path)
        record = _same_place(r.record(), path)
        seen[in_trigger] = (result, xcoms, record, list(r.cluster.created), r.completions)
    (w_result, w_xcoms, w_record, w_created, w_completions) = seen[False]
    (t_result, t_xcoms, t_record, t_created, t_completions) = seen[True]
    assert (w_completions, t_completions) == (2, 1)
    assert w_result == t_result and w_created == t_created
    assert _times_as_set(w_xcoms["attempts"]) == _times_as_set(t_xcoms["attempts"])
    assert _ledger_facts(w_xcoms["ledger"]) == _ledger_facts(t_xcoms["ledger"])
    assert [d["kind"] for d in t_xcoms["ledger"]["decisions"]] == ["next-attempt-in-try", "succeed"]
    # every other XCom (the attempt's end, the run, the links) the same whoever submitted attempt 2
    others = set(w_xcoms) - {"attempts", "ledger", "progress"}
    assert others == set(t_xcoms) - {"attempts", "ledger", "progress"}
    assert {k: w_xcoms[k] for k in others} == {k: t_xcoms[k] for k in others}
    for record in (w_record, t_record):
        record["attempts"] = _times_as_set(record["attempts"])
        record["ledger"] = _ledger_facts(record["ledger"])
        record.pop("updated")
        record.pop("progress")
    assert w_record == t_record


def test_two_live_copies_create_one_next_attempt(run):
    """(b) Two copies of the trigger on the same end: one attempt 2 (the second create's 409 is followed), attempt 1's
    record closed once and its decision in the ledger once."""
    r = run()
    first = r.defer()
    classpath, kwargs = first.serialize()
    second = type(first)(**kwargs)
    second.task_instance = r.ti

    async def both():
        return await asyncio.gather(r.events(first), r.events(second))

    results = asyncio.run(both())
    assert [len(events) for events in results] == [1, 1]
    assert len(r.cluster.created) == 2  # attempt 1 and one attempt 2
    kinds = [JobSetEvent.from_payload(events[0].payload).verdict["kind"] for events in results]
    assert kinds == ["succeed", "succeed"]
    ledger = r.comms.xcoms["ledger"]
    assert [d["attempt"] for d in ledger["decisions"] if d["kind"] == "next-attempt-in-try"] == [1]
    result = r.complete(results[0][0])
    assert result["attempt"] == 2
    assert [a["attempt"] for a in r.xcoms()["attempts"]] == [1, 2]


def test_a_create_answered_409_follows_the_attempt_already_there(run):
    """(b) The copy that comes second finds the name taken by this task's attempt 2 and follows it."""
    r = run()
    trigger = r.defer()
    real_create = r.cluster.create

    def create_twice(namespace, body):  # another copy got there first, just before this create
        if body["metadata"]["name"].endswith("-a2"):
            r.cluster.create = real_create
            real_create(namespace, body)
        return real_create(namespace, body)

    r.cluster.create = create_twice
    (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed"
    assert len(r.cluster.created) == 2


def test_a_trigger_rebuilt_from_its_first_kwargs_follows_the_newest_attempt(run, caplog, capsys):
    """(c) A triggerer restart after attempt 2 was created: the trigger rebuilt from attempt 1's kwargs follows
    attempt 2, without deciding attempt 1 again."""
    r = run()
    trigger = r.defer()
    classpath, kwargs = trigger.serialize()
    # Stop the first run right after it submitted attempt 2: the watch of attempt 2 never reads.
    real_follow = next_in_try.following

    class Stopped(Exception):
        pass

    def following(trigger, name, extra):
        raise Stopped(name)

    next_in_try.following = following
    try:
        with pytest.raises(Stopped):
            asyncio.run(r.events(trigger))
    finally:
        next_in_try.following = real_follow
    assert len(r.cluster.created) == 2
    decisions = len(r.comms.xcoms["ledger"]["decisions"])
    rebuilt = type(trigger)(**kwargs)
    rebuilt.task_instance = r.ti
    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(r.events(rebuilt))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.extra["attempt"] == 2 and ev.verdict["kind"] == "succeed"
    assert len(r.cluster.created) == 2
    assert any("not deciding attempt 1 again" in line for line in _said(capsys, caplog))
    assert r.complete(event)["attempt"] == 2
    # attempt 1 decided once; its record closed once
    kinds = [d["kind"] for d in r.xcoms()["ledger"]["decisions"]]
    assert kinds.count("next-attempt-in-try") == 1 and len(kinds) == decisions + 1
    assert [a["attempt"] for a in r.xcoms()["attempts"]] == [1, 2]


@pytest.mark.parametrize("failure", [ApiError(503, "the server is currently unable to handle the request",
                                               "ServiceUnavailable"),
                                     Retryable("timed out")])
def test_a_create_that_fails_hands_the_try_to_a_worker_that_submits_it(run, monkeypatch, failure, fast_retries):
    """(d) The API failing at the create: attempt 1 is closed once, nothing is lost, the worker submits attempt 2."""
    monkeypatch.setattr(next_in_try, "CREATE_OUTAGE_S", 0.0)
    r = run()
    trigger = r.defer()
    r.cluster.create_errors = [failure] * 8  # more than the adapter's own retries
    (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == NEXT_ATTEMPT_PENDING and ev.extra["attempt"] == 1, ev
    assert len(r.cluster.created) == 1 and r.cluster.deleted == []
    r.cluster.create_errors = []
    with pytest.raises(TaskDeferred) as deferred:  # the worker plans, deletes attempt 1, submits attempt 2
        r.complete(event)
    assert len(r.cluster.created) == 2 and r.cluster.created[1].endswith("-a2")
    nxt = deferred.value.trigger
    nxt.task_instance = r.ti
    (event,) = asyncio.run(r.events(nxt))
    assert r.complete(event)["attempt"] == 2
    attempts = r.xcoms()["attempts"]
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "disrupted"), (2, "finished")]
    kinds = [d["kind"] for d in r.xcoms()["ledger"]["decisions"]]
    assert kinds == ["next-attempt-in-try", "succeed"]


def test_on_by_default(run, tmp_path):
    """The operator as a DAG writes it (the flag left out): its trigger carries the next attempt and submits it."""
    r = run()
    r.op = launch(str(tmp_path), deferrable=True)
    assert r.op.next_attempt_in_trigger is True
    trigger = r.defer()
    assert "next_attempt" in trigger.extra
    (event,) = asyncio.run(r.events(trigger))
    assert JobSetEvent.from_payload(event.payload).extra["attempt"] == 2 and len(r.cluster.created) == 2


def test_turned_off_or_without_a_task_instance_the_worker_submits(run):
    """`next_attempt_in_trigger=False`, or no task instance (dag.test, the synchronous path): the worker's loop."""
    r = run(next_attempt_in_trigger=False)
    trigger = r.defer()
    assert "next_attempt" not in trigger.extra
    (event,) = asyncio.run(r.events(trigger))
    assert JobSetEvent.from_payload(event.payload).extra["attempt"] == 1 and len(r.cluster.created) == 1
    r2 = run(path=r.tmp_path / "second")
    trigger = r2.defer()
    trigger.task_instance = None
    (event,) = asyncio.run(r2.events(trigger))
    assert JobSetEvent.from_payload(event.payload).extra["attempt"] == 1 and len(r2.cluster.created) == 1


def test_a_failed_attempt_within_keep_failed_attempts_is_kept(run, caplog, capsys):
    """keep_failed_attempts holds from the triggerer too: a failed attempt 1 (after progress) stays, logged."""
    r = run(keep_failed_attempts=1)
    r.cluster._scripts[0] = [status_running(), reach(r.tmp_path, 40, status_failed(restarts=2))]
    trigger = r.defer()
    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(r.events(trigger))
    assert JobSetEvent.from_payload(event.payload).extra["attempt"] == 2
    assert r.cluster.deleted == []
    assert any("keeping failed JobSet" in line and "trigger of try 1" in line for line in _said(capsys, caplog))


@pytest.mark.parametrize("failure", [ApiError(503, "the server is currently unable to handle the request",
                                               "ServiceUnavailable"),
                                     Retryable("timed out")])
def test_a_delete_of_the_ended_attempt_that_fails_keeps_the_next_attempt_followed(run, monkeypatch, caplog, capsys,
                                                                                  failure, fast_retries):
    """The API gone (or a request that times out) at the delete of attempt 1 after attempt 2 exists: an ended JobSet
    holds no running pods, so the trigger logs it and follows attempt 2; nothing else is deleted."""
    r = run()
    trigger = r.defer()

    def refused(self, namespace, name, reason="unspecified"):
        raise failure

    monkeypatch.setattr(MemoryJobSetApi, "delete", refused)
    with caplog.at_level(logging.INFO):
        (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.verdict["kind"] == "succeed" and ev.extra["attempt"] == 2
    assert r.cluster.deleted == [] and len(r.cluster.created) == 2
    assert any("could not delete this task's ended attempts from the triggerer" in line
               for line in _said(capsys, caplog))
    assert r.complete(event)["attempt"] == 2


def test_a_run_lock_another_try_holds_leaves_the_end_to_a_worker(run):
    """One writer per run: a trigger whose try no longer holds the run lock (the task was cleared and its next try
    took it) creates nothing, and hands the end to the worker."""
    from mtc_provider.adapters.run_lock import OWNER

    r = run()
    trigger = r.defer()
    (lock_key,) = [key for key in r.cluster.locks if key[1].startswith("mtc-run-")]  # not the directory's claim
    data = r.cluster.locks[lock_key]["data"]
    data[OWNER] = json.dumps({**json.loads(data[OWNER]), "try_number": 2})
    (event,) = asyncio.run(r.events(trigger))
    ev = JobSetEvent.from_payload(event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 1 and len(r.cluster.created) == 1
    assert r.cluster.deleted == []


def test_the_triggers_links_of_a_next_attempt_are_the_workers():
    """The console links the trigger stores for an attempt it submitted are those the worker's launch stores
    (links.jobset.link_urls, read from the target's console scope as the operator hands it over)."""
    from mtc_provider.links.jobset import CheckpointFolderLink, link_urls
    from mtc_provider.target import GkeTarget
    from mtc_provider.targets import backend_for
    from mtc_provider.triggers.next_in_try import console_links

    target = GkeTarget("proj", "us-central1", "tpu")
    scope = backend_for(target).console
    console = {"project_id": scope.project_id, "location": scope.location, "cluster_name": scope.cluster_name,
               "replicated_job": "slice"}
    urls = link_urls(target, "ml", "train-27ba2-a2", "gs://b/run/checkpoints", 1765000000.0, None, "slice")
    urls.pop(CheckpointFolderLink.key)  # the run's, the same for every attempt
    assert dict(console_links(console, "ml", "train-27ba2-a2", 1765000000.0)) == urls
    assert all(urls.values())


def test_a_copy_that_sees_its_attempt_deleted_follows_the_next_one(run, monkeypatch):
    """A copy of the trigger that started before attempt 2 existed and whose watch of attempt 1 then sees only its
    deletion (another copy ended it, submitted attempt 2 and deleted attempt 1; a polling watch sees a GET's 404,
    not the states in between: adapters.kubernetes `watch`) follows attempt 2, not "deleted outside this task",
    which would end the run."""
    from mtc_provider.triggers import stall_end

    real = stall_end.resumed
    starts = []

    async def none_at_start(trigger):  # its start came before attempt 2 was created (attempt 1 still there)
        starts.append(trigger.name)
        return None if len(starts) == 1 else await real(trigger)

    r = run()
    first = r.defer()
    classpath, kwargs = first.serialize()
    (event,) = asyncio.run(r.events(first))  # attempt 1 ended, attempt 2 followed to its end
    name = kwargs["name"]
    before_deletion = [e for e in r.cluster.events[("default", name)] if e.type != "DELETED"][-1]
    assert name in r.cluster.deleted and name not in r.cluster.present()
    late = type(first)(**{**kwargs, "resource_version": before_deletion.obj["metadata"]["resourceVersion"]})
    late.task_instance = r.ti
    monkeypatch.setattr(stall_end, "resumed", none_at_start)
    (late_event,) = asyncio.run(r.events(late))
    assert starts[:2] == [name, name]  # its start, then the deletion
    ev = JobSetEvent.from_payload(late_event.payload)
    assert ev.kind == ENDED and ev.extra["attempt"] == 2, ev
    assert len(r.cluster.created) == 2


class TriggererStopped(BaseException):
    """The triggerer process ends mid-step (not an error the trigger handles)."""


def test_a_restart_between_the_close_and_the_create_decides_once_and_creates_once(run, monkeypatch):
    """A triggerer stop after attempt 1's record was closed and before attempt 2 existed: the rebuilt trigger sees
    attempt 1 ended again, its record is not closed twice nor its facts added twice, and attempt 2 is created."""
    from mtc_provider.hooks.jobset import MtcJobSetHook

    r = run()
    trigger = r.defer()
    classpath, kwargs = trigger.serialize()
    real = MtcJobSetHook.submit_attempt

    def stop(self, *args, **kw):
        raise TriggererStopped()

    monkeypatch.setattr(MtcJobSetHook, "submit_attempt", stop)
    with pytest.raises(TriggererStopped):
        asyncio.run(r.events(trigger))
    closed = [a for a in r.comms.xcoms["attempts"] if a["end"] is not None]
    assert [a["attempt"] for a in closed] == [1] and len(r.cluster.created) == 1
    monkeypatch.setattr(MtcJobSetHook, "submit_attempt", real)
    rebuilt = type(trigger)(**kwargs)
    rebuilt.task_instance = r.ti
    (event,) = asyncio.run(r.events(rebuilt))
    assert JobSetEvent.from_payload(event.payload).extra["attempt"] == 2 and len(r.cluster.created) == 2
    assert r.complete(event)["attempt"] == 2
    attempts = r.xcoms()["attempts"]
    assert [(a["attempt"], a["end"] == closed[0]["end"]) for a in attempts] == [(1, True), (2, False)]
    assert [d["kind"] for d in r.xcoms()["ledger"]["decisions"]] == ["next-attempt-in-try", "succeed"]


def test_a_confirmed_kill_stops_the_attempt_followed_now(run, monkeypatch, tmp_path):
    """on_kill of the trigger Airflow holds (built for attempt 1) stops attempt 2, the one it follows now."""
    from mtc_provider.adapters import task_state
    from mtc_provider.core.attempt.ownership import TaskLookup

    async def marked_failed(owner):
        return TaskLookup(True, "failed"), ""

    monkeypatch.setattr(task_state, "atry_lookup", marked_failed)
    # attempt 1 is preempted after progress; attempt 2 trains on
    r = run([[status_running(), reach(tmp_path, 40, status_completed())], [status_running()] * 50])
    trigger = r.defer()

    async def until_following():
        events = trigger.run()
        task = asyncio.ensure_future(events.__anext__())
        for _ in range(500):
            await asyncio.sleep(0.01)
            if trigger._following is not None:
                break
        await trigger.on_kill()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(until_following())
    first, second = r.cluster.created
    assert second not in r.cluster.live()
    assert [name for name, reason in r.cluster.delete_reasons] == [first, second]
