"""Progress while a run trains: the trigger logs "step N of T, S steps/h, ETA, newest checkpoint, restarts so far"
every `progress_interval` (stall detection on or off), carries the figures in its event, and the launch operator
pushes them to XCom `progress`. The trigger's wall clock is stepped by hand; checkpoints are real folders."""

from __future__ import annotations

import os
import time

import pytest
from airflow.sdk.exceptions import TaskDeferred

from tests.support.js_helpers import jobset_body
from mtc_provider.adapters.protocols import CheckpointInfo
from tests.doubles.memory_jobset import status_completed, status_running
from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
from mtc_provider.core.attempt.status import JobSetState
from mtc_provider.operators.jobset import PROGRESS_XCOM_KEY, MtcJobSetOperator
from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from mtc_provider.triggers.jobset import JobSetTrigger

CONNECTION = {"kind": "local", "home": "/nonexistent/mtc-home"}
RUNNING = JobSetState("train", "default", "running")


class Clock:
    """The trigger's wall clock, stepped by hand (commit times are wall times too: see `finalize`)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def finalize(checkpoints, step: int, at: float | None = None) -> None:
    """A finalized Orbax step folder (what the local store lists: `<step>/commit_success.txt`, committed at `at`)."""
    (checkpoints / str(step)).mkdir(parents=True, exist_ok=True)
    marker = checkpoints / str(step) / "commit_success.txt"
    marker.write_text("")
    if at is not None:
        os.utime(marker, (at, at))


class LogLines:
    """The trigger's log as lines. Structlog's output stream depends on how earlier tests in the session set up
    logging, so the tests read what the trigger logged here rather than from captured stdout."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _record(self, message: str, *args, **_kwargs) -> None:
        self.lines.append(message % args if args else message)

    debug = info = warning = error = exception = _record

    def text(self) -> str:
        return "\n".join(self.lines)


def recording(trigger: JobSetTrigger) -> LogLines:
    trigger._log = log = LogLines()  # LoggingMixin keeps its logger in `_log`
    return log


def trigger_at(checkpoints, clock: Clock, progress_interval: float | None, stall_timeout: float | None = None):
    trigger = JobSetTrigger(connection=CONNECTION, namespace="default", name="train", checkpoint_dir=str(checkpoints),
                            extra={"target_step": 1000, "attempt": 2},
                            watch=WatchSettings(times=WatchTimes(progress_interval=progress_interval),
                                                stall_timeout=stall_timeout))
    trigger.clock = clock
    return trigger


async def test_progress_line_every_interval_without_stall_detection(tmp_path):
    checkpoints, clock = tmp_path / "checkpoints", Clock()
    finalize(checkpoints, 100, at=clock.now)
    trigger = trigger_at(checkpoints, clock, progress_interval=300, stall_timeout=None)
    log = recording(trigger)
    first = await trigger.report_progress(restarts=1)
    assert first["newest_checkpoint"] == 100 and first["steps_per_hour"] is None and first["restarts"] == 1
    clock.now += 120  # before the interval: no listing, no line
    finalize(checkpoints, 200, at=clock.now + 180)  # committed 300 s after step 100
    assert await trigger.report_progress(restarts=1) is None
    clock.now += 180  # 300 s after the first line: 100 steps in 300 s = 1200 steps/h, 800 steps left = 40 min
    report = await trigger.report_progress(restarts=1)
    # The keys of earlier releases keep their meaning (the run view reads them); `source` and `updated_at` are new.
    assert report == {"step": 200, "target_step": 1000, "steps_per_hour": 1200.0, "eta_seconds": 2400.0,
                      "newest_checkpoint": 200, "restarts": 1, "attempt": 2, "percent": 20.0,
                      "source": "checkpoints", "updated_at": round(clock.now, 3)}
    lines = [line for line in log.lines if "steps/h" in line or "rate unknown" in line]
    assert len(lines) == 2
    assert ("step 200 of 1000 (20%), 1200 steps/h, ETA 40m00s, newest checkpoint 200, restarts so far 1 (attempt 2)"
            in lines[1])
    # The next event carries the latest figures, for the operator's XCom.
    event = JobSetEvent.from_payload(trigger.event(ENDED, RUNNING, 1).payload)
    assert event.progress == report


async def test_progress_reuses_the_stall_checks_listing(tmp_path):
    checkpoints, clock = tmp_path / "checkpoints", Clock()
    trigger = trigger_at(checkpoints, clock, progress_interval=60, stall_timeout=3600)
    assert await trigger.check_stall(RUNNING) is None  # the stall clock starts
    finalize(checkpoints, 50)
    clock.now += 60
    assert await trigger.check_stall(RUNNING) is None
    report = await trigger.report_progress(restarts=0)
    assert report["newest_checkpoint"] == 50 and report["eta_seconds"] is None


async def test_no_progress_without_a_checkpoint_dir_or_interval(tmp_path):
    clock = Clock()
    assert await trigger_at(tmp_path, clock, progress_interval=None).report_progress(0) is None
    off = JobSetTrigger(connection=CONNECTION, namespace="default", name="train", extra={"target_step": 10},
                        watch=WatchSettings(times=WatchTimes(progress_interval=60)))
    assert await off.report_progress(0) is None and off._tick() is None  # nothing to list: no ticks either


def test_progress_interval_survives_serialization():
    trigger = JobSetTrigger(connection=CONNECTION, namespace="ml", name="t",
                            watch=WatchSettings(times=WatchTimes(progress_interval=30)))
    classpath, kwargs = trigger.serialize()
    assert kwargs["watch"]["times"]["progress_interval"] == 30
    assert JobSetTrigger(**kwargs).serialize() == (classpath, kwargs)


async def test_a_quiet_watch_still_logs_progress(cluster, tmp_path):
    """No status change for a while (a healthy run): the progress tick still lists and logs, then the run ends."""
    trigger = None

    def ends_after_a_progress_line(obj):  # a script frame: the JobSet completes once a progress line was logged
        deadline = time.monotonic() + 5
        while not (trigger and trigger.last_progress) and time.monotonic() < deadline:
            time.sleep(0.01)
        return status_completed()

    cluster.plan([status_running(), ends_after_a_progress_line])
    cluster.create("default", jobset_body())
    checkpoints = tmp_path / "checkpoints"
    finalize(checkpoints, 10)
    trigger = JobSetTrigger(connection=CONNECTION, namespace="default", name="train",
                            checkpoint_dir=str(checkpoints), extra={"target_step": 100, "attempt": 1},
                            watch=WatchSettings(times=WatchTimes(poll_interval=0.02, progress_interval=0.05)))
    log = recording(trigger)
    events = [JobSetEvent.from_payload(e.payload) async for e in trigger.run()]
    assert [e.kind for e in events] == [ENDED]
    assert events[0].progress["newest_checkpoint"] == 10 and events[0].progress["target_step"] == 100
    assert "step 10 of 100 (10%)" in log.text()


class FakeTI:
    dag_id, run_id, task_id, try_number, max_tries = "d", "manual__1", "train", 1, 6

    def __init__(self) -> None:
        self.xcom: dict = {}

    def xcom_push(self, key, value) -> None:
        self.xcom[key] = value


def test_operator_lists_for_progress_without_stall_detection_and_pushes_the_figures(tmp_path, cluster):
    op = MtcJobSetOperator(
        task_id="train",
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": "llama", "base_output_directory": str(tmp_path / "out"), "steps": 10},
        workload={"jobset_name": "llama"}, deferrable=True, progress_interval=30, stall_timeout=None,
        checkpoint_store_factory=lambda d, c: type("S", (), {"finalized": lambda s, d, _: [CheckpointInfo(10, d)]})(),
    )
    ti = FakeTI()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": ti})
    trigger = deferred.value.trigger
    assert trigger.checkpoint_dir and trigger.watch.stall_timeout is None
    assert trigger.watch.times.progress_interval == 30.0
    figures = {"step": 10, "target_step": 10, "steps_per_hour": 600.0, "eta_seconds": 0.0, "newest_checkpoint": 10,
               "restarts": 0, "attempt": 1, "percent": 100.0}
    state = JobSetState(trigger.name, trigger.namespace, "succeeded")
    event = JobSetEvent(ENDED, trigger.namespace, trigger.name, state, 0, extra=trigger.extra, progress=figures)
    op.execute_complete({"ti": ti}, event.to_payload())
    assert ti.xcom[PROGRESS_XCOM_KEY] == figures


async def test_the_local_workloads_step_events_give_the_step(tmp_path):
    """On the local target the workload's own `step` events (adapters.workload_events) give the step, newer than any
    checkpoint; events from before this start of the pods (an earlier attempt of the run) do not count."""
    from mtc_provider.adapters.workload_events import append_event, events_path

    base, clock = tmp_path / "out", Clock()
    checkpoints = base / "llama" / "checkpoints"
    finalize(checkpoints, 100, at=clock.now - 60)
    events = events_path(str(base), "llama", 0)
    append_event(events, ts=clock.now - 3600, event="step", process=0, step=900)  # an earlier attempt's
    trigger = trigger_at(checkpoints, clock, progress_interval=60, stall_timeout=None)
    trigger._live_since = clock.now - 10
    first = await trigger.report_progress(restarts=0)
    assert first["step"] == 100 and first["source"] == "checkpoints"
    append_event(events, ts=clock.now, event="step", process=0, step=130)
    clock.now += 60
    append_event(events, ts=clock.now, event="step", process=0, step=160)
    second = await trigger.report_progress(restarts=0)
    assert second["step"] == 160 and second["source"] == "workload-events" and second["newest_checkpoint"] == 100
    assert second["percent"] == 16.0


async def test_the_newest_checkpoint_is_the_runs_and_the_first_rate_is_timed_by_the_lines(tmp_path):
    """A later attempt's progress line names the checkpoint it started from (not "none yet"), and the rate counts
    the steps by when they were logged, not by when a read found them (a read every pod_logs_interval finds 30
    steps at once: counted at the read, the first ETA came out several times too short)."""
    checkpoints, clock = tmp_path / "checkpoints", Clock()
    trigger = JobSetTrigger(connection=CONNECTION, namespace="default", name="train", checkpoint_dir=str(checkpoints),
                            extra={"target_step": 1000, "attempt": 3, "history": [None, 200, 400]},
                            watch=WatchSettings(times=WatchTimes(progress_interval=60)))
    trigger.clock = clock
    start = clock.now
    clock.now = start + 30  # a read finds step 410, logged at start + 10 (one step a second)
    trigger._observe_step(410, clock.now, "workload-log", at=start + 10)
    # the next read, 45 s later, finds step 470, logged at start + 70
    trigger._observe_step(470, start + 75, "workload-log", at=start + 70)
    clock.now = start + 75
    report = await trigger.report_progress(restarts=0)
    assert report["newest_checkpoint"] == 400  # the attempt's start: finalized before this watch began
    assert report["steps_per_hour"] == 3600.0 and report["eta_seconds"] == 530.0, report
