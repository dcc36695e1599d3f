"""The stall clock starts from the last step the workload made, not from when a slow source was read.

The stall acceptance test saw the verdict 54 s after the last checkpoint with stall_timeout 30 while the verdict's
message said 31 s: the leader's log is read every `pod_logs_interval` (30 s), and its `completed step` lines
counted as progress at the read, although the workload's events (read every poll) had shown the same step ~20 s
before. Two rules fix it, each pinned here: a step another source already showed is no progress, and a step
counts from when it was written (the log line's timestamp, which Kubernetes adds with `timestamps=true`), never
later than when it was seen.

The leader's log is served by the Kubernetes API double, which answers `read log` with `timestamps` and
`sinceSeconds` as the API reference documents (tests/adapters/test_js_pod_logs.py), read through the real client
and LeaderLogFollower; the trigger's clock is stepped by hand.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.adapters.test_js_pod_logs import add_pod, factory
from tests.doubles.kubernetes import KubernetesApiDouble
from mtc_provider.core.attempt.launch_options import PodLogs, WatchSettings, WatchTimes
from mtc_provider.adapters.pod_logs import KubernetesPodLogs, LeaderLogFollower
from mtc_provider.core.measure.progress import PERSISTENT, REPORTED_EVENTS, REPORTED_LOG, ProgressSignal
from mtc_provider.core.attempt.status import JobSetState
from mtc_provider.core.measure.step_log import latest_step_line_at, log_timestamp
from mtc_provider.triggers.jobset import JobSetTrigger

pytestmark = pytest.mark.timeout(120)
RUNNING = JobSetState("train", "default", "running")
STALL = 30.0
LEADER = "train-slice-0-0-aaaaa"


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_step_another_source_already_showed_does_not_restart_the_clock():
    signal = ProgressSignal(started_at=0.0)
    assert signal.observe(22, REPORTED_EVENTS, 10.0)  # the local workload's event, read at the next poll
    assert signal.observe(22, REPORTED_LOG, 30.0)  # the same step in the leader's log, read 20 s later
    assert signal.seconds_without_progress(41.0) == 31.0  # from the event, not from the log's read
    assert signal.stalled(41.0, STALL)
    assert signal.observe(22, PERSISTENT, 35.0)  # new for its source (logged as a new checkpoint) ...
    assert signal.seconds_without_progress(41.0) == 31.0  # ... but no progress either
    assert signal.observe(23, REPORTED_LOG, 50.0) and signal.seconds_without_progress(50.0) == 0.0


def test_a_step_counts_from_when_it_happened_never_later_than_when_it_was_seen():
    signal = ProgressSignal(started_at=0.0)
    signal.observe(5, REPORTED_LOG, 40.0, at=12.0)
    assert signal.seconds_without_progress(40.0) == 28.0
    signal.observe(6, REPORTED_LOG, 45.0, at=99.0)  # a clock ahead of ours: never in the future
    assert signal.seconds_without_progress(45.0) == 0.0
    signal.observe(7, REPORTED_LOG, 46.0, at=1.0)  # an older time than the last progress: the clock never goes back
    assert signal.seconds_without_progress(46.0) == 1.0


def test_kubernetes_log_timestamps_parse_to_unix_seconds():
    assert log_timestamp("2026-12-02T07:55:01.960997123Z") == pytest.approx(1796198101.960997, abs=1e-6)
    assert log_timestamp("2026-12-02T08:55:01+01:00") == 1796198101.0
    assert log_timestamp("not a time") is None
    assert log_timestamp("2026-12-02T07:55:01") is None  # no zone: which instant is unknown
    assert log_timestamp("2026-13-02T07:55:01Z") is None  # no 13th month
    line, at = latest_step_line_at([("2026-12-02T07:55:00Z", "completed step: 21, seconds: 1.2, loss: 0.4"),
                                    ("2026-12-02T07:55:01Z", "completed step: 22, seconds: 1.2, loss: 0.4"),
                                    ("2026-12-02T07:55:02Z", "[process 0] saved step 22")])
    assert (line.step, at) == (22, 1796198101.0)


@pytest.fixture
def core():
    double = KubernetesApiDouble().start()
    add_pod(double, LEADER, 0, 0)  # the leader: job index 0, completion index 0
    yield double
    double.stop()


def _trigger(clock: _Clock, core, checkpoint_dir: str) -> JobSetTrigger:
    trigger = JobSetTrigger(connection={"kind": "gke", "cluster_url": "https://gke.invalid"}, namespace="default",
                            name="train", checkpoint_dir=checkpoint_dir,
                            watch=WatchSettings(times=WatchTimes(progress_interval=None),
                                                pod_logs=PodLogs(enabled=True, interval=30.0), stall_timeout=STALL,
                                                push_progress=False))
    trigger.clock = clock
    trigger._follower = LeaderLogFollower(KubernetesPodLogs(factory(core)), "default", "train", clock=clock)
    return trigger


async def test_the_leaders_lines_read_late_count_from_their_timestamps(core, tmp_path):
    """GKE: the leader's log is the only reported source. The workload makes steps 1-10 (one a second) and hangs;
    the log is read 25 s after the last line (pod_logs_interval 30). The verdict comes stall_timeout after step 10
    was written; before the fix it came stall_timeout after the read."""
    start = time.time() - 120  # in the past, so the double's sinceSeconds (real time) keeps every line
    clock = _Clock(start)
    trigger = _trigger(clock, core, str(tmp_path / "checkpoints"))
    assert await trigger.check_stall(RUNNING) is None  # the pods started: the clock starts
    core.write_log(LEADER, *[f"completed step: {s}, seconds: 1.000, loss: 2.000" for s in range(1, 11)])
    core.logs[LEADER] = [(start + i + 1, line) for i, (_, line) in enumerate(core.logs[LEADER])]
    hung_at = start + 10
    clock.now = hung_at + 25
    await trigger.follow_pod_logs()
    assert await trigger.check_stall(RUNNING) is None
    assert trigger.stall.signal.alive.step == 10
    clock.now = hung_at + STALL + 1
    reason = await trigger.check_stall(RUNNING)
    assert reason is not None and "for 31s" in reason, reason  # 31 s after the hang, as the message says


async def test_the_same_step_in_the_events_then_in_the_log_keeps_the_clock(core, tmp_path):
    """The local target: the workload's events (read every poll) show step 22 when it happens; the leader's log
    shows it again at its next read, 20 s later, stamped later still (a clock that runs ahead). The verdict still
    comes stall_timeout after the event, as in the acceptance test's hang."""
    start = time.time() - 120
    clock = _Clock(start)
    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    events = tmp_path / "run" / "events"
    events.mkdir()
    trigger = _trigger(clock, core, str(checkpoints))
    trigger._live_since = start
    assert await trigger.check_stall(RUNNING) is None
    hung_at = start + 5
    (events / "process-0.jsonl").write_text(json.dumps({"ts": hung_at, "event": "step", "process": 0,
                                                        "step": 22}) + "\n")
    clock.now = hung_at + 1
    assert await trigger.check_stall(RUNNING) is None  # the event: step 22, progress at hung_at
    core.write_log(LEADER, "completed step: 22, seconds: 1.200, loss: 0.400", at=hung_at + 20)
    clock.now = hung_at + 21
    await trigger.follow_pod_logs()
    assert trigger.stall.signal.newest[REPORTED_LOG].step == 22
    clock.now = hung_at + STALL + 1
    reason = await trigger.check_stall(RUNNING)
    assert reason is not None and "for 31s" in reason, reason
