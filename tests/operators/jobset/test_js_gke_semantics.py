"""The launch operator and its trigger against the in-memory cluster behaving as Kubernetes and JobSet do.

Each test is named after its scenario (issue 11) and cites the documented behaviour its double reproduces:
- Foreground deletion: kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion
  ("the object ... is still visible through the Kubernetes API until the deletion process is complete"; the API
  server sets metadata.deletionTimestamp and adds the foregroundDeletion finalizer) and
  /docs/tasks/administer-cluster/use-cascade-deletion/ (propagationPolicy: Foreground).
- Pods that never start: kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-state-waiting
  (ErrImagePull, ImagePullBackOff; the pod stays Pending) and /docs/concepts/scheduling-eviction/ (PodScheduled
  False, reason Unschedulable, the scheduler's message); a Job only fails on failed pods, so neither fails.
- JobSet conditions: kubernetes-sigs/jobset pkg/constants/constants.go (ReachedMaxRestarts, FailedJobs,
  AllJobsCompleted with their fixed messages).
Fast: the synchronous path runs the trigger inline; a try is one `execute` with a plain task instance.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from tests.support.js_helpers import FakeTI, finalize, jobset_body, launch, run_try
from tests.support.js_helpers import ckpt_dir as _ckpt, reach as _reach
from tests.doubles.memory_jobset import (
    ALL_JOBS_COMPLETED_MESSAGE,
    REACHED_MAX_RESTARTS_MESSAGE,
    AsyncMemoryJobSetApi,
    pod_unschedulable,
    pod_waiting,
    status_completed,
    status_failed,
    status_pending,
    status_running,
)
from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
from mtc_provider.core.basics import labels as L
from mtc_provider.core.attempt.ownership import TaskLookup, kill_verdict
from mtc_provider.core.attempt.resubmission import SUBMIT, TAKE_RESULT, plan_try
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_provider.operators.jobset import JobSetAttemptFailed
from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from mtc_provider.triggers.jobset import JobSetTrigger

pytestmark = pytest.mark.timeout(120)


def _slow(status: dict, seconds: float = 0.05):
    """A frame that takes real time, so a stall clock (seconds) can run while the JobSet stays in `status`."""
    def frame(obj):
        time.sleep(seconds)
        return status
    return frame


def _restarted_pending() -> dict:
    """After an in-cluster restart: the new pods Pending (active, none ready), `restarts` 1."""
    status = status_running(restarts=1)
    status["replicatedJobsStatus"][0].update(ready=0, active=2)
    return status


def _active_not_ready() -> dict:
    """What JobSet reports while its pods are Pending: child Jobs active (Job.status.active counts pending
    pods), none ready (kubernetes.io/docs/concepts/workloads/controllers/job/#job-status)."""
    status = status_running()
    status["replicatedJobsStatus"][0].update(ready=0, active=2)
    return status


# --- the doubles behave as documented ------------------------------------------------------------------
async def test_foreground_deletion_keeps_the_object_readable_then_modified_then_deleted(cluster):
    created = cluster.create("default", jobset_body())
    cluster.advance("default", "train")  # running
    before = cluster.get("default", "train")["status"]
    cluster.delete("default", "train")
    obj = cluster.get("default", "train")  # still readable: DELETE returned at once
    assert obj["metadata"]["deletionTimestamp"] and "foregroundDeletion" in obj["metadata"]["finalizers"]
    assert obj["status"] == before and evaluate_jobset(obj).terminating and not evaluate_jobset(obj).live
    assert cluster.live() == [] and cluster.present() == ["train"]
    kinds = [e.type async for e in AsyncMemoryJobSetApi(cluster).watch(
        "default", "train", created["metadata"]["resourceVersion"])]
    assert kinds[-2:] == ["MODIFIED", "DELETED"] and cluster.present() == []


def test_jobset_conditions_carry_jobsets_own_reasons_and_messages():
    failed = status_failed(failed_job="train-slice-0")["conditions"][0]
    assert (failed["reason"], failed["message"]) == (
        "ReachedMaxRestarts", f"{REACHED_MAX_RESTARTS_MESSAGE} (first failed job: train-slice-0)")
    assert status_completed()["conditions"][0]["message"] == ALL_JOBS_COMPLETED_MESSAGE


# --- 1. terminating --------------------------------------------------------------------------------------
def test_terminating_jobset_after_a_stall_is_waited_for_then_resubmitted(cluster, tmp_path):
    cluster.plan([status_running()] + [_slow(status_running())] * 200,  # hangs: no checkpoint ever
                 [status_running(), _reach(tmp_path, 100, status_completed())])
    cluster.deletion_reads = 5
    op = launch(str(tmp_path), stall_timeout=0.2, poll_interval=0.01)
    with pytest.raises(JobSetAttemptFailed, match="stalled"):
        run_try(op, FakeTI(try_number=1))
    first = cluster.created[0]
    assert cluster.deleted == [first] and cluster.terminating() == [first]  # deleted, still terminating
    result = run_try(launch(str(tmp_path), stall_timeout=5, poll_interval=0.01), FakeTI(try_number=2))
    assert result["last_step"] == 100 and len(cluster.created) == 2
    assert first not in cluster.present()


def test_terminating_jobset_after_a_trigger_on_kill_is_not_reattached_to(cluster, tmp_path, monkeypatch):
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    cluster.plan([status_running()], [status_running(), _reach(tmp_path, 100, status_completed())])
    ti = FakeTI(try_number=1)
    with pytest.raises(TaskDeferred) as deferred:
        run_try(launch(str(tmp_path), deferrable=True), ti)
    # A user marked the deferred task failed (then cleared it to start again): Airflow answers state failed for it
    # (TaskInstance.set_state); the triggerer then runs on_kill. (A clear alone keeps it: tests/triggers/
    # test_clear_keeps.py.)
    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states",
                        staticmethod(lambda **kw: {ti.run_id: {ti.task_id: "failed"}}))
    trigger = deferred.value.trigger
    ti.map_index = -1
    trigger.task_instance = ti
    asyncio.run(trigger.on_kill())
    assert cluster.terminating() == cluster.created
    result = run_try(launch(str(tmp_path)), FakeTI(try_number=2))
    assert result["last_step"] == 100 and len(cluster.created) == 2 and cluster.created[0] not in cluster.present()


# --- 2. stall_history ----------------------------------------------------------------------------------
def test_stall_history_survives_deletion_and_hangs_at_one_step_hit_the_crash_loop_guard(cluster, tmp_path):
    finalize(_ckpt(tmp_path), 20)
    hang = [status_running()] + [_slow(status_running())] * 200
    cluster.plan(*([hang] * 5))
    outcomes = []
    for attempt in range(1, 6):
        try:
            run_try(launch(str(tmp_path), stall_timeout=0.15, poll_interval=0.01, crash_loop_attempts=2),
                    FakeTI(try_number=attempt))
        except AirflowFailException as exc:
            outcomes.append(("fail", str(exc)))
            break
        except JobSetAttemptFailed:
            outcomes.append(("retry", ""))
    assert [kind for kind, _ in outcomes] == ["retry", "fail"]
    assert "crash loop" in outcomes[-1][1] and "[20, 20]" in outcomes[-1][1]
    assert cluster.locks == {}  # released with the run


# --- 3. image_pull / unschedulable -------------------------------------------------------------------
# What cannot heal fails at once; pull errors the kubelet retries with back-off fail after image_pull_timeout
# (kubernetes.io/docs/concepts/containers/images/#imagepullbackoff), both with the pod's own message.
@pytest.mark.parametrize("reason, image_pull_timeout", [
    ("ErrImagePull", 0.3), ("ImagePullBackOff", 0.3), ("InvalidImageName", 3600), ("CreateContainerConfigError", 3600)])
def test_image_pull_and_config_errors_fail_with_the_pods_message(cluster, tmp_path, reason, image_pull_timeout):
    def pods_cannot_start(obj):
        cluster.set_pods("default", obj["metadata"]["name"], [pod_waiting(obj["metadata"]["name"], reason, index=i)
                                                              for i in range(2)])
        return _active_not_ready()

    cluster.plan([pods_cannot_start] + [_slow(_active_not_ready(), 0.01)] * 100)
    with pytest.raises(AirflowFailException) as failed:
        run_try(launch(str(tmp_path), stall_timeout=5, poll_interval=0.01, image_pull_timeout=image_pull_timeout),
                FakeTI())
    message = pod_waiting("x", reason)["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert reason in str(failed.value) and message.replace("x", "") in str(failed.value).replace("x", "")
    assert ("image_pull_timeout" in str(failed.value)) == (image_pull_timeout < 1)
    assert cluster.deleted == cluster.created and cluster.locks == {}


def test_unschedulable_pods_log_waiting_for_capacity_and_the_stall_clock_does_not_run(cluster, tmp_path, capsys):
    def no_capacity(obj):
        cluster.set_pods("default", obj["metadata"]["name"], [pod_unschedulable(obj["metadata"]["name"], i)
                                                              for i in range(2)])
        return _active_not_ready()

    cluster.plan([no_capacity] + [_slow(_active_not_ready(), 0.02)] * 200)
    with pytest.raises(AirflowFailException, match="did not start within startup_timeout") as failed:
        run_try(launch(str(tmp_path), stall_timeout=0.05, startup_timeout=0.6, capacity_log_interval=0.2,
                       poll_interval=0.01), FakeTI())
    assert "Insufficient google.com/tpu" in str(failed.value)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "waiting for capacity: 0 of 2 pods scheduled" in ln]
    assert 2 <= len(lines) <= 5 and "0/12 nodes are available" in lines[0]  # every capacity_log_interval


def test_new_pods_that_never_start_after_progress_are_an_interruption_followed_in_the_same_try(cluster, tmp_path):
    """The attempt trains and saves step 20; a host is lost and the JobSet restarts in the cluster, but the
    replacement pods never become ready (a new node whose ramdisk never mounts stays Pending: kubelet's FailedMount,
    tests/operators/jobset/test_js_local_start_faults.py). After startup_timeout that start is an interruption,
    not a final failure: its JobSet is deleted by the attempt's own end and the same try submits the next attempt
    (new pods), which resumes from step 20 and finishes."""
    def restarted_never_ready(obj):
        cluster.set_pods("default", obj["metadata"]["name"], [pod_unschedulable(obj["metadata"]["name"], i)
                                                              for i in range(2)])
        return _restarted_pending()

    cluster.plan([status_running(), _reach(tmp_path, 20, status_running()), restarted_never_ready]
                 + [_slow(_restarted_pending(), 0.02)] * 200,
                 [status_running(), _reach(tmp_path, 100, status_completed())])
    ti = FakeTI(try_number=1, max_tries=0)  # the last try: only an in-try attempt can finish the run
    result = run_try(launch(str(tmp_path), startup_timeout=0.6, poll_interval=0.01), ti)
    assert result["last_step"] == 100 and len(cluster.created) == 2
    assert cluster.delete_reasons[0] == (cluster.created[0], "attempt-failed")  # by the attempt's own end
    first = ti.xcoms["attempts"][0]
    assert first["outcome"] == "disrupted" and "did not start within startup_timeout" in first["reason"], first


async def test_unschedulable_stall_clock_does_not_run_while_the_jobset_is_pending(cluster, tmp_path):
    cluster.plan([_slow(status_pending(), 0.05)] * 12 + [status_completed()])  # 0.6s pending > stall_timeout
    created = cluster.create("default", jobset_body())
    trigger = JobSetTrigger(connection={"kind": "local", "home": str(tmp_path)}, namespace="default", name="train",
                            resource_version=created["metadata"]["resourceVersion"],
                            checkpoint_dir=str(tmp_path / "ckpt"),
                            watch=WatchSettings(times=WatchTimes(poll_interval=0.01), stall_timeout=0.2))
    events = [JobSetEvent.from_payload(e.payload) async for e in trigger.run()]
    assert [e.kind for e in events] == [ENDED]


# --- 5. second_writer ----------------------------------------------------------------------------------
def test_second_writer_two_launches_at_once_exactly_one_proceeds(cluster, tmp_path):
    barrier = threading.Barrier(2, timeout=2)

    def both_listed():  # without an atomic lock both would pass "no other live JobSet" here
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass

    cluster.after_list = both_listed
    outcomes: dict[str, BaseException] = {}

    def start(run_id: str) -> None:
        try:
            run_try(launch(str(tmp_path), deferrable=True), FakeTI(run_id=run_id))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcomes[run_id] = exc

    threads = [threading.Thread(target=start, args=(run_id,)) for run_id in ("manual__a", "manual__b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    kinds = sorted(type(exc).__name__ for exc in outcomes.values())
    assert kinds == ["AirflowFailException", "TaskDeferred"], outcomes
    refused = next(exc for exc in outcomes.values() if isinstance(exc, AirflowFailException))
    assert "is held by" in str(refused) and "kubectl delete configmap" in str(refused)
    run_locks = [name for _, name in cluster.locks if name.startswith("mtc-run-")]  # beside it: the directory claim
    assert len(cluster.created) == 1 and len(run_locks) == 1


def test_second_writer_lock_is_released_by_the_teardown_and_then_another_run_proceeds(cluster, tmp_path):
    from mtc_provider.operators.jobset import MtcDeleteJobSetOperator

    cluster.plan([status_running(), status_failed()])
    with pytest.raises(TaskDeferred):
        run_try(launch(str(tmp_path), deferrable=True), FakeTI(run_id="manual__a"))
    with pytest.raises(AirflowFailException, match="is held by"):
        run_try(launch(str(tmp_path), deferrable=True), FakeTI(run_id="manual__b"))
    # run a's attempt has ended (the teardown runs after `train`); a live one whose lock `train` still holds would be
    # kept (tests/dags/test_teardown_rule.py)
    while cluster.advance("default", cluster.created[0]):
        pass
    assert evaluate_jobset(cluster.get("default", cluster.created[0])).ended
    teardown = MtcDeleteJobSetOperator(task_id="teardown", run_name="llama", launch_task_id="train",
                                       target={"kind": "local", "home": str(tmp_path / "home")})
    teardown.execute({"ti": FakeTI(run_id="manual__a", task_id="teardown")})
    assert cluster.locks == {}
    with pytest.raises(TaskDeferred):
        run_try(launch(str(tmp_path), deferrable=True), FakeTI(run_id="manual__b"))


# --- 6. label_collision / the DAG run id is part of the key ---------------------------------------------
LONG = "scheduled__2026-01-01T00:00:00+00:00__" + "x" * 40


def test_label_collision_long_ids_sharing_63_characters_get_different_labels():
    a, b = L.label_value(LONG + "-run-a"), L.label_value(LONG + "-run-b")
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert L.label_value("a:b") != L.label_value("a+b")  # a replaced character never merges two ids
    assert L.label_value("plain-id_1.2") == "plain-id_1.2"  # valid short values are kept as they are


def test_label_collision_another_runs_jobset_is_neither_adopted_nor_torn_down(cluster, tmp_path):
    other = jobset_body()
    other["metadata"].update(name="llama-other-a1", labels=L.run_labels("dag", LONG + "-run-b", "train", "llama"))
    cluster.create("default", other)
    cluster.objects[("default", "llama-other-a1")]["status"] = status_failed()  # ended: "mine" would be deleted
    cluster.plan([status_running(), _reach(tmp_path, 100, status_completed())])
    run_try(launch(str(tmp_path)), FakeTI(run_id=LONG + "-run-a"))
    assert "llama-other-a1" in cluster.present() and "llama-other-a1" not in cluster.deleted


def test_a_live_jobset_of_another_dag_run_of_the_same_dag_is_not_this_tasks():
    mine = L.run_labels("dag", "manual__1", "train", "llama")
    assert L.belongs_to(mine, mine)
    assert not L.belongs_to({**mine, L.RUN_ID: "manual__2"}, mine)
    assert not L.belongs_to({**mine, L.TASK_ID: "other"}, mine)


def test_a_live_jobset_of_another_dag_run_is_refused_not_reattached(cluster, tmp_path):
    other = jobset_body()
    other["metadata"].update(name="llama-b-a1", labels=L.run_labels("dag", "manual__b", "train", "llama"))
    cluster.create("default", other)
    cluster.objects[("default", "llama-b-a1")]["status"] = status_running()
    with pytest.raises(AirflowFailException, match="already has a live JobSet"):
        run_try(launch(str(tmp_path)), FakeTI(run_id="manual__a"))
    assert cluster.created == ["llama-b-a1"]


# --- 7. failed_at_target ---------------------------------------------------------------------------------
def test_failed_at_target_plan_takes_the_result():
    failed = evaluate_jobset({"metadata": {"name": "a1"}, "status": status_failed()})
    assert plan_try([failed], 100, 100).kind == TAKE_RESULT
    assert plan_try([failed], 80, 100).kind == SUBMIT


def test_failed_at_target_is_success_not_a_resubmission(cluster, tmp_path):
    cluster.plan([status_running(), _reach(tmp_path, 100, status_failed())])
    op = launch(str(tmp_path), deferrable=True)
    with pytest.raises(TaskDeferred):
        run_try(op, FakeTI(try_number=1))  # the worker goes away; the JobSet ends Failed after step 100
    cluster.advance("default", cluster.created[0])
    cluster.advance("default", cluster.created[0])
    result = run_try(launch(str(tmp_path)), FakeTI(try_number=2))
    assert result["last_step"] == 100 and "target" in result["reason"] and len(cluster.created) == 1


# --- mutations the issue lists ---------------------------------------------------------------------------
def test_stall_deletes_the_jobset_and_keeps_the_checkpoints(cluster, tmp_path):
    finalize(_ckpt(tmp_path), 40)
    cluster.plan([status_running()] + [_slow(status_running())] * 200,
                 [status_running(), _reach(tmp_path, 100, status_completed())])
    with pytest.raises(JobSetAttemptFailed, match="stalled"):
        run_try(launch(str(tmp_path), stall_timeout=0.2, poll_interval=0.01), FakeTI(try_number=1))
    assert cluster.deleted == cluster.created  # the stalled attempt's slices are freed
    run_try(launch(str(tmp_path), poll_interval=0.01), FakeTI(try_number=2))
    assert sorted(p.name for p in (tmp_path / "out" / "llama" / "checkpoints").iterdir()) == ["100", "40"]


def test_stall_timeout_reaches_the_trigger(cluster, tmp_path):
    with pytest.raises(TaskDeferred) as deferred:
        run_try(launch(str(tmp_path), deferrable=True, stall_timeout="600", poll_interval=30), FakeTI())
    trigger = deferred.value.trigger
    assert trigger.watch.stall_timeout == 600.0 and trigger.checkpoint_dir == _ckpt(tmp_path)


# --- 9. worker_sigterm -----------------------------------------------------------------------------------
@pytest.mark.parametrize("state, deletes, run_over", [
    ("running", False, False), ("deferred", False, False), ("queued", False, False), ("scheduled", False, False),
    ("up_for_retry", False, False),  # its next try reattaches to the JobSet
    ("up_for_reschedule", False, False),
    (None, False, False), ("restarting", False, False),  # a user's clear: the next try reattaches
    ("failed", True, True), ("success", True, True), ("skipped", True, True), ("upstream_failed", True, True),
    ("removed", True, True),
    ("no row", True, True),  # the DAG run was deleted
    ("unknown", False, False),  # Airflow could not be asked: keep
])
def test_worker_sigterm_deletes_only_on_a_users_kill(state, deletes, run_over):
    """The one live kill rule (core.attempt.ownership.kill_verdict), over every state Airflow can answer."""
    lookup = {"no row": TaskLookup(False), "unknown": None}.get(state, TaskLookup(True, state))
    verdict = kill_verdict(lookup, "DAG d, run r, task train, try 2", "ReadTimeout")
    assert (verdict.delete, verdict.run_over) == (deletes, run_over), verdict.reason


def test_a_cancelled_trigger_never_claims_its_own_try_is_the_deferred_one():
    """Issue #33 item 12: the state lookup (GetTaskStates) answers a state, no try number; when try 2 deferred
    with its own trigger, try 1's cancelled trigger hears `deferred` too and must not say "try 1 is still
    deferred"."""
    reason = kill_verdict(TaskLookup(True, "deferred"), "DAG d, run r, task train, try 1").reason
    assert "try 1 is still deferred" not in reason
    assert "still deferred, by this try" in reason and "or by a newer try" in reason


@pytest.mark.parametrize("state, deletes", [("running", False), ("failed", True)])
def test_worker_sigterm_on_kill_of_a_synchronous_try(cluster, tmp_path, state, deletes):
    """A worker's SIGTERM runs on_kill while the server still says `running`: the JobSet keeps training."""
    seen = {}

    class Launch(type(launch(str(tmp_path)))):
        def _task_lookup(self):  # what the API server answers during the kill (GetTaskStates)
            from mtc_provider.core.attempt.ownership import TaskLookup

            return TaskLookup(found=True, state=state), ""

    def kill_mid_wait(obj):
        seen["op"].on_kill()
        return status_running()

    cluster.plan([status_running(), kill_mid_wait, _reach(tmp_path, 100, status_completed())])
    op = launch(str(tmp_path))
    op.__class__ = Launch
    seen["op"] = op
    try:
        run_try(op, FakeTI())
    except Exception:  # noqa: BLE001 - a deleted JobSet ends the try; what matters is the cluster
        pass
    assert (cluster.created[0] in cluster.deleted) is deletes


# --- 10. attempt_records ---------------------------------------------------------------------------------
def test_attempt_records_give_goodput_below_one_with_the_outage_as_a_disruption(cluster, tmp_path):
    from mtc_provider.operators.goodput import GoodputReportOperator

    def reach(step, status):
        def frame(obj):
            time.sleep(0.05)
            finalize(_ckpt(tmp_path), step)
            return status
        return frame

    cluster.plan([status_running(), reach(20, status_running(restarts=0)), reach(40, status_failed(restarts=2))],
                 [status_running(), reach(60, status_running()), reach(80, status_running()),
                  reach(100, status_completed())])
    # step 40 exists before attempt 1, which ends there: no progress, so the next attempt is the next try's (one that
    # progressed would be followed in the same try: test_js_interruptions.py)
    finalize(_ckpt(tmp_path), 40)
    first = FakeTI(try_number=1)
    with pytest.raises(JobSetAttemptFailed):
        run_try(launch(str(tmp_path), checkpoint_store_factory=None), first)
    time.sleep(0.4)  # the outage between attempts (retry delay, capacity): downtime, not training
    second = FakeTI(try_number=2)
    run_try(launch(str(tmp_path), checkpoint_store_factory=None), second)
    records = second.xcoms["attempts"]
    assert [(r["attempt"], r["outcome"], r["last_step"]) for r in records] == [(1, "disrupted", 40),
                                                                            (2, "finished", 100)]
    assert records[0]["restarts"] == 2 and records[0]["end"] < records[1]["start"]
    report = GoodputReportOperator(task_id="goodput", checkpoint_dir=_ckpt(tmp_path),
                                   attempts=str(records)).execute({"run_id": "r"})  # as a template renders it
    assert report["disruptions"] == 1 and 0 < report["goodput"] < 1
    assert report["badput_s"]["downtime"] >= 0.4
    assert cluster.locks == {}  # released with the run
    assert cluster.deleted == cluster.created[:1]  # the ended attempt was deleted before the next one ...
    assert sorted(int(p.name) for p in (tmp_path / "out" / "llama" / "checkpoints").iterdir()
                  if p.name.isdigit()) == [20, 40, 60, 80, 100]  # ... and its checkpoints were kept
