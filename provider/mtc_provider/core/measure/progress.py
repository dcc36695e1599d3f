"""Progress of a run: finalized checkpoints (rate, time since the last one, stalls), and the one progress signal
that every source feeds (ProgressSignal: `alive` for stalls, `restorable` for what a resubmission resumes from).

Fed observations (step, commit_time, now). A step at or below the latest never counts, so a listing that
goes backwards (a restore from an older checkpoint, an eventually consistent listing) cannot reset the
stall clock. The stall clock starts when tracking starts, because a resubmitted run needs time to restore.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mtc_provider.core.basics.payload import Payload


@dataclass(frozen=True)
class Progress(Payload):
    """What the UI shows: the XCom of the sensor and the payload of its trigger events."""

    latest_step: int | None
    commit_time: float | None
    steps_per_hour: float | None
    seconds_since_checkpoint: float | None

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> "Progress":
        return cls(data.get("latest_step"), data.get("commit_time"), data.get("steps_per_hour"),
                   data.get("seconds_since_checkpoint"))


class StallClock:
    """The stall clock both trackers share: `started_at` (when watching began) and `last_progress_at` (the last new
    step), as their dataclass fields."""

    started_at: float
    last_progress_at: float | None

    def seconds_without_progress(self, now: float) -> float:
        """Time since the last new step was seen, or since watching began."""
        return max(0.0, now - max(self.started_at, self.last_progress_at or self.started_at))

    def pause(self, seconds: float) -> None:
        """Time in which progress could not be observed (a listing outage): it does not count towards a stall."""
        self.started_at += max(0.0, seconds)
        if self.last_progress_at is not None:
            self.last_progress_at += max(0.0, seconds)

    def stalled(self, now: float, stall_timeout: float) -> bool:
        """No new step for longer than `stall_timeout` seconds while watching."""
        return self.seconds_without_progress(now) > stall_timeout


@dataclass
class ProgressTracker(StallClock):
    """Tracks finalized steps. `started_at` is when watching began (unix s); `window_s` the rate window."""

    started_at: float
    window_s: float = 3600.0
    latest_step: int | None = None
    latest_commit_time: float | None = None
    # (time, step) of each new step; time is the commit time when known, else when it was first seen.
    points: list[tuple[float, int]] = field(default_factory=list)
    last_progress_at: float | None = None

    def observe(self, step: int | None, commit_time: float | None, now: float) -> bool:
        """Record the newest finalized step seen at `now`; True when it is new progress."""
        if step is None or (self.latest_step is not None and step <= self.latest_step):
            return False
        self.latest_step = step
        self.latest_commit_time = commit_time
        self.last_progress_at = now
        self.points.append((commit_time if commit_time is not None else now, step))
        return True

    def steps_per_hour(self, now: float) -> float | None:
        """Steps per hour between the oldest and newest checkpoint inside the window; None with fewer than 2."""
        inside = [(t, s) for t, s in self.points if now - self.window_s <= t <= now]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) * 3600.0 / (inside[-1][0] - inside[0][0])

    def seconds_since_checkpoint(self, now: float) -> float | None:
        """Time since the latest checkpoint was committed (or first seen, when its commit time is unknown)."""
        if self.latest_step is None:
            return None
        reference = self.latest_commit_time if self.latest_commit_time is not None else self.last_progress_at
        return max(0.0, now - reference)

    def progress(self, now: float) -> Progress:
        return Progress(self.latest_step, self.latest_commit_time, self.steps_per_hour(now),
                        self.seconds_since_checkpoint(now))


# ---------------------------------------------------------------------------------------------------------------
# One progress signal: every source a run makes progress in, each observation with its source.
#
# A real run reports a step every few seconds (the leader's `completed step` lines; the local workload's events)
# but saves a persistent checkpoint "much more rarely" (every ~38 min in examples/gke-v6e.yaml), and in multi-tier
# mode never: the MTC replicator backs the local tier up instead. Counting only persistent steps deletes healthy
# attempts, so the stall clock runs on `alive` (any source), while what a resubmission resumes from is
# `restorable` (persistent or replicator: what survives the attempt's pods).

REPORTED_LOG = "workload-log"  # the leader pod's `completed step` lines (core.measure.step_log.FROM_LOG)
REPORTED_EVENTS = "workload-events"  # the local workload's `step` events (core.measure.step_log.FROM_EVENTS)
LOCAL_TIER = "local-tier"  # a save in the ramdisk, where the target can see it
REPLICATOR = "replicator-backup"  # an MTC replicator backup `<job>-s<step>-n<node>-w<worker>.meta`
PERSISTENT = "checkpoints"  # a finalized persistent checkpoint (`<step>/commit_success.txt`; core.measure.step_log)
SOURCES = (REPORTED_LOG, REPORTED_EVENTS, LOCAL_TIER, REPLICATOR, PERSISTENT)
RESTORABLE = (PERSISTENT, REPLICATOR)  # they outlive the attempt's pods: a resubmission can resume from them
# Steps the workload reports start again from the restored checkpoint after a restart of the pods; saves never go
# back (core.measure.listing.newer_than).
REPORTED = (REPORTED_LOG, REPORTED_EVENTS)
# How a user reads the source, after "step N" (run view, `mtc status`, the progress line).
SOURCE_WORDS = {REPORTED_LOG: "reported by the leader's log", REPORTED_EVENTS: "reported by the workload's events",
                LOCAL_TIER: "saved in the local tier", REPLICATOR: "backed up by the MTC replicator",
                PERSISTENT: "persistent checkpoint"}


@dataclass(frozen=True)
class Observation:
    """One step seen in one source at `at` (unix s; when it was seen, or its commit time when known)."""

    step: int
    source: str
    at: float

    def words(self) -> str:
        return f"step {self.step} ({SOURCE_WORDS.get(self.source, self.source)})"


@dataclass
class ProgressSignal(StallClock):
    """The newest step of each source, and when any of them last advanced (the stall clock).

    An observation is new when its step is above the newest one of *its own* source: a reported step after an
    in-cluster restart (`new_start`) counts again from the restored step, a save never goes backwards. It is
    *progress* (the stall clock starts again) only when it is also above every other source's step: the same step
    seen later through a slower source is no news. The clock starts again from when the step happened (`at`: a log
    line's timestamp, an event's or a commit's time), never later than when it was seen: the leader's log is read
    every `pod_logs_interval` (30 s), and counting its lines from the read would start the clock up to that late
    (with stall_timeout 30: a verdict 54 s after the last checkpoint, its message saying 31 s).
    """

    started_at: float
    newest: dict[str, Observation] = field(default_factory=dict)
    last_progress_at: float | None = None
    # (time, step) of each advance of `alive`, for the step time the run reports (the derived stall limit).
    points: list[tuple[float, int]] = field(default_factory=list)

    def observe(self, step: int | None, source: str, now: float, at: float | None = None) -> bool:
        """Record `step` from `source` seen at `now`, which happened at `at` when known; True when it is new for its
        source. The stall clock starts again only when `alive` advances (see the class)."""
        if step is None:
            return False
        if source not in SOURCES:
            raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")
        previous = self.newest.get(source)
        if previous is not None and step <= previous.step:
            return False
        alive = self.alive
        self.newest[source] = Observation(int(step), source, at if at is not None else now)
        if alive is not None and step <= alive.step:
            return True  # another source showed this step already: not progress
        happened = now if at is None else min(now, at)
        self.last_progress_at = happened if self.last_progress_at is None else max(self.last_progress_at, happened)
        if not self.points or step > self.points[-1][1]:
            self.points.append((happened, int(step)))
            del self.points[:-64]  # a bounded window is enough for a step time
        return True

    def new_start(self) -> None:
        """The pods started again (an in-cluster restart): reported steps restart from the restored checkpoint."""
        for source in REPORTED:
            self.newest.pop(source, None)
        self.points = [p for p in self.points[-1:]]

    @property
    def alive(self) -> Observation | None:
        """The newest step of any source (a restorable one wins a tie: it says more)."""
        return _newest(self.newest.values())

    @property
    def restorable(self) -> Observation | None:
        """The newest persistent checkpoint or replicator backup: what a resubmission can resume from."""
        return _newest(o for o in self.newest.values() if o.source in RESTORABLE)

    def step_seconds(self) -> float | None:
        """Seconds per step between the first and last advance of `alive` in the window; None before two."""
        if len(self.points) < 2 or self.points[-1][1] <= self.points[0][1]:
            return None
        (t0, s0), (t1, s1) = self.points[0], self.points[-1]
        return max(0.0, t1 - t0) / (s1 - s0)

    def figures(self) -> dict[str, Any]:
        """What the progress XCom adds (keys only ever added): the alive and restorable steps with their sources."""
        alive, restorable = self.alive, self.restorable
        return {"alive_step": alive.step if alive else None, "alive_source": alive.source if alive else None,
                "restorable_step": restorable.step if restorable else None,
                "restorable_source": restorable.source if restorable else None}


def _newest(observations) -> Observation | None:
    best = None
    for o in observations:
        if best is None or (o.step, o.source in RESTORABLE) > (best.step, best.source in RESTORABLE):
            best = o
    return best


def replicator_backup_dir(checkpointing: Any) -> str | None:
    """Where the MTC replicator backs this run up, in multi-tier mode only; else None: `gs://<bucket>/<run_name>`.

    The replicator writes into the CheckpointConfiguration's bucket (`cloudStorageBucketName`, the run's bucket:
    readiness cross-checks it), under the job name MaxText gives it (`job-name: <run_name>` in `replicator.yaml`:
    Orbax `experimental/emergency/multi_tier_checkpointing/initialization.py`, called with MaxText's `run_name`),
    one folder per backup named by its time (`YYYY-MM-DD_HH-MM`), each node's `<job>-s<step>-n<node>-w<worker>.meta`
    beside `D<hash>.data` (GoogleCloudPlatform/ml-auto-solutions `dags/orbax/util/validation_util.py`;
    `dags/orbax/maxtext_mtc_save_gcs.py` reads `<bucket>/<run_name>/<time>/` while its base_output_directory is
    `<bucket>/<out_folder>`). So the bucket's root, not `base_output_directory`; listed recursively for `*.meta`
    (`GcsCheckpointStore.newest_backup`: a step counts once every node backed it up).
    """
    if not getattr(checkpointing, "enable_multi_tier_checkpointing", False):
        return None
    base = checkpointing.base_output_directory.rstrip("/")
    if base.startswith("gs://"):
        return f"gs://{base[len('gs://'):].split('/', 1)[0]}/{checkpointing.run_name}"
    return f"{base}/{checkpointing.run_name}"  # the local target: its bucket folder (mtc_local.runner.replicator)


@dataclass
class FirstSteps:
    """Each start of the pods' time from its pods running to its first reported step (seconds), within an attempt:
    what the next start's first-step limit is derived from (core.measure.cadence.first_step_limit)."""

    measured: list[float] = field(default_factory=list)
    running_since: float | None = None  # the current start's pods run since then; None: not running yet
    stepped: bool = False  # the current start reported a step
    ever_stepped: bool = False  # a start of this attempt reported a step: the workload's steps are readable

    def running(self, now: float) -> None:
        """The current start's pods run (the first time it is said counts)."""
        if self.running_since is None:
            self.running_since = now

    def new_start(self) -> None:
        """New pods (an in-cluster restart): not running yet, no step yet."""
        self.running_since, self.stepped = None, False

    def step(self, now: float, at: float | None = None) -> float | None:
        """A reported step seen at `now` (written at `at`): the current start's time to its first step when this is
        that step, else None."""
        self.ever_stepped = True
        if self.stepped or self.running_since is None:
            self.stepped = True
            return None
        self.stepped = True
        seconds = max(0.0, min(now, at if at is not None else now) - self.running_since)
        self.measured.append(seconds)
        del self.measured[:-64]
        return seconds

    def waiting(self, now: float) -> float | None:
        """Seconds the current start has run without a reported step; None once it reported one, or not running."""
        if self.stepped or self.running_since is None:
            return None
        return max(0.0, now - self.running_since)

    def pause(self, seconds: float) -> None:
        """Time in which steps could not be observed (the listing or the log failing) does not count."""
        if self.running_since is not None:
            self.running_since += max(0.0, seconds)


@dataclass
class RestorableClock(StallClock):
    """When restorable progress last advanced over the whole attempt (in-cluster restarts do not start it again):
    a new persistent checkpoint, a complete replicator backup, or a start of the pods restoring a newer step."""

    started_at: float
    step: int | None = None
    last_progress_at: float | None = None
    how: str = ""  # what the newest restorable step is, in words

    def observe(self, step: int | None, now: float, how: str, at: float | None = None) -> bool:
        """True when `step` is newer than every restorable step seen; the clock then starts again from `at`."""
        if step is None or (self.step is not None and step <= self.step):
            return False
        self.step, self.how = int(step), how
        happened = now if at is None else min(now, at)
        self.last_progress_at = happened if self.last_progress_at is None else max(self.last_progress_at, happened)
        return True
