"""The JobSet trigger over the scripted in-memory api: typed events, restart logs, resume, kill. No real sleeps."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.js_helpers import jobset_body
from tests.doubles.memory_jobset import (
    status_completed,
    status_failed,
    status_restarting,
    status_running,
)
from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
from mtc_provider.core.attempt.jobset_events import DELETED, ENDED, STALLED, JobSetEvent
from mtc_provider.triggers.jobset import JobSetTrigger

CONNECTION = {"kind": "local", "home": "/nonexistent/mtc-home"}


def _trigger(**kwargs) -> JobSetTrigger:
    return JobSetTrigger(connection=CONNECTION, namespace="default", name="train",
                         watch=WatchSettings(times=WatchTimes(poll_interval=0)), **kwargs)


async def _events(trigger: JobSetTrigger) -> list[JobSetEvent]:
    return [JobSetEvent.from_payload(e.payload) async for e in trigger.run()]


def test_serialize_round_trip():
    trigger = JobSetTrigger(connection={"kind": "gke", "cluster_url": "https://1.2.3.4", "ssl_ca_cert": "Q0E=",
                                        "gcp_conn_id": "gcp", "impersonation_chain": None},
                            namespace="ml", name="train-a1", resource_version="42", restarts_seen=2,
                            checkpoint_dir="gs://b/run/checkpoints", delete_on_kill=False,
                            watch=WatchSettings(times=WatchTimes(poll_interval=5), stall_timeout=600))
    classpath, kwargs = trigger.serialize()
    assert classpath == "mtc_provider.triggers.jobset.JobSetTrigger"
    again = JobSetTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert not any("token" in key.lower() for key in kwargs["connection"])


def test_event_payload_round_trip():
    event = JobSetEvent(ENDED, "ml", "train", None, 3, "why")
    assert JobSetEvent.from_payload(event.to_payload()) == event


async def test_reports_success_and_logs_each_restart(cluster, capsys):
    cluster.plan([status_running(), status_restarting(restarts=1), status_running(restarts=1),
                  status_restarting(restarts=2), status_completed(restarts=2)])
    cluster.create("default", jobset_body())
    events = await _events(_trigger())
    assert [e.kind for e in events] == [ENDED]
    assert events[0].state.phase == "succeeded" and events[0].restarts_seen == 2
    # Airflow routes task/trigger logs through structlog to stdout.
    restarts = [line for line in capsys.readouterr().out.splitlines() if "restarted in the cluster" in line]
    assert len(restarts) == 2
    assert "restart 1" in restarts[0] and "replicated job slice failed" in restarts[0]


async def test_reports_non_retryable_failure(cluster):
    cluster.plan([status_running(), status_failed("FailJobSetFailurePolicyAction", "applying FailJobSet",
                                                   failed_job="train-slice-1")])
    cluster.create("default", jobset_body())
    (event,) = await _events(_trigger())
    assert event.state.phase == "failed" and not event.state.retryable
    assert event.state.failed_replicated_job == "slice"


async def test_deleted_while_watching(cluster):
    cluster.plan([status_running(), lambda obj: cluster.delete("default", "train") or {}])
    cluster.create("default", jobset_body())
    (event,) = await _events(_trigger())
    assert event.kind == DELETED


async def test_restarted_trigger_resumes_without_duplicating(cluster):
    """A triggerer restart: the first trigger is cancelled mid-watch, a new one is built from serialize()."""
    cluster.plan([status_running(), status_restarting(restarts=1), status_running(restarts=1),
                  status_completed(restarts=1)])
    created = cluster.create("default", jobset_body())
    first = _trigger(resource_version=created["metadata"]["resourceVersion"])
    agen = first.run()
    task = asyncio.ensure_future(agen.__anext__())
    for _ in range(3):  # let it read a few frames, then the triggerer goes away
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises((asyncio.CancelledError, StopAsyncIteration)):
        await task
    await agen.aclose()
    await first.cleanup()
    assert cluster.live() == ["train"] and cluster.deleted == []  # a restart never deletes
    _, kwargs = first.serialize()
    (event,) = await _events(JobSetTrigger(**kwargs))
    assert event.kind == ENDED and event.state.phase == "succeeded"
    assert cluster.created == ["train"] and cluster.deleted == []


async def test_on_kill_keeps_the_jobset_unless_a_user_action_is_confirmed(cluster):
    """Without a task instance to ask about (or with delete_on_kill off), a cancelled watch never deletes; the
    confirmed cases run in the real triggerer (test_js_ownership_triggerer.py)."""
    cluster.create("default", jobset_body())
    await _trigger(delete_on_kill=False).on_kill()
    assert cluster.live() == ["train"]
    await _trigger().on_kill()  # no task instance: Airflow cannot be asked, so nothing is confirmed
    assert cluster.live() == ["train"] and cluster.deleted == []


class _StallAfterTwoChecks(JobSetTrigger):
    """What the stall-detection extension point looks like when filled."""

    checks = 0

    async def check_stall(self, state):
        type(self).checks += 1
        return "no new checkpoint for 600s" if type(self).checks >= 2 else None


async def test_stall_extension_point_ends_the_watch(cluster):
    cluster.plan([status_running()] * 5 + [status_completed()])
    cluster.create("default", jobset_body())
    trigger = _StallAfterTwoChecks(connection=CONNECTION, namespace="default", name="train", checkpoint_dir="/tmp/ckpt",
                                   watch=WatchSettings(times=WatchTimes(poll_interval=0), stall_timeout=600))
    (event,) = await _events(trigger)
    assert event.kind == STALLED and "no new checkpoint" in event.message
    assert cluster.live() == ["train"]  # the operator decides what to do with a stalled attempt


async def test_a_hung_attempt_whose_status_never_changes_is_reported_stalled(cluster, tmp_path):
    """No watch event ever arrives (the workload hangs; JobSet status stays Running): the stall clock still runs.

    Load-proof: the trigger's stall clock is stepped by the test (`JobSetTrigger.clock`), and what is asserted is
    the logical order: quiet ticks keep checking without a verdict while the clock stays within stall_timeout,
    and the first check after the clock passes it reports the stall."""
    cluster.plan([])  # no status changes after creation
    created = cluster.create("default", jobset_body())
    cluster.objects[("default", "train")]["status"] = status_running()
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "10").mkdir(parents=True)
    (checkpoints / "10" / "commit_success.txt").write_text("")
    trigger = JobSetTrigger(connection=CONNECTION, namespace="default", name="train",
                            resource_version=created["metadata"]["resourceVersion"], checkpoint_dir=str(checkpoints),
                            watch=WatchSettings(times=WatchTimes(poll_interval=0.05), stall_timeout=0.3))
    now = [1_000_000.0]
    trigger.clock = lambda: now[0]
    verdicts: list[str | None] = []
    check_stall = trigger.check_stall

    async def counted(state):
        verdicts.append(await check_stall(state))
        return verdicts[-1]

    trigger.check_stall = counted

    async def checks(n: int) -> None:
        while len(verdicts) < n and not task.done():
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(_events(trigger))
    await asyncio.wait_for(checks(3), timeout=60)  # quiet ticks, no watch event: the JobSet is read, then checked
    now[0] += 0.29  # within stall_timeout: more quiet ticks, still no verdict
    seen = len(verdicts)
    await asyncio.wait_for(checks(seen + 3), timeout=60)
    assert not any(verdicts) and not task.done(), verdicts
    before = len(verdicts)
    now[0] += 0.02  # past stall_timeout: the next check (one poll interval on) says stalled
    (event,) = await asyncio.wait_for(task, timeout=60)
    # at most one check still under way with the earlier time, then the first one after the limit stops the watch
    after = verdicts[before:]
    assert after[-1] and not any(after[:-1]) and len(after) <= 2, verdicts
    assert event.kind == STALLED and "newest finalized step 10" in event.message
    assert cluster.live() == ["train"]  # the operator, not the trigger, deletes the stalled attempt
