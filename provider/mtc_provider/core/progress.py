"""Progress of a run from the finalized checkpoints it writes: rate, time since the last one, and stalls.

Fed observations (step, commit_time, now). A step at or below the latest never counts, so a listing that
goes backwards (a restore from an older checkpoint, an eventually consistent listing) cannot reset the
stall clock. The stall clock starts when tracking starts, because a resubmitted run needs time to restore.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Progress:
    """What the UI shows: the XCom of the sensor and the payload of its trigger events."""

    latest_step: int | None
    commit_time: float | None
    steps_per_hour: float | None
    seconds_since_checkpoint: float | None

    def to_payload(self) -> dict[str, Any]:
        return {
            "latest_step": self.latest_step,
            "commit_time": self.commit_time,
            "steps_per_hour": self.steps_per_hour,
            "seconds_since_checkpoint": self.seconds_since_checkpoint,
        }

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> "Progress":
        return cls(data.get("latest_step"), data.get("commit_time"), data.get("steps_per_hour"),
                   data.get("seconds_since_checkpoint"))


@dataclass
class ProgressTracker:
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

    def seconds_without_progress(self, now: float) -> float:
        """Time since the last new step was seen, or since watching began."""
        return max(0.0, now - max(self.started_at, self.last_progress_at or self.started_at))

    def pause(self, seconds: float) -> None:
        """Time in which progress could not be observed (a listing outage): it does not count towards a stall."""
        self.started_at += max(0.0, seconds)
        if self.last_progress_at is not None:
            self.last_progress_at += max(0.0, seconds)

    def stalled(self, now: float, stall_timeout: float) -> bool:
        """No new finalized step for longer than `stall_timeout` seconds while watching."""
        return self.seconds_without_progress(now) > stall_timeout

    def progress(self, now: float) -> Progress:
        return Progress(self.latest_step, self.latest_commit_time, self.steps_per_hour(now),
                        self.seconds_since_checkpoint(now))
