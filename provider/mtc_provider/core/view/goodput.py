"""Goodput accounting from a run's timeline, after Google's ml-goodput-measurement definitions.

Goodput is the share of elapsed wall-clock time spent on productive, preserved training steps: steps that
completed and were not rolled back by a disruption. Badput is the rest, by cause: startup (attempt start to
training, plus first-step compilation beyond the ideal step time), checkpoint restore, blocking checkpoint
save, wasted progress (steps redone after a disruption), downtime between attempts, and other.
Recovery time of a disruption: from the attempt's end until the next attempt trains again.

One `Timeline` feeds it from either source: the local workload's JSON-lines events (fine-grained steps) or,
on GKE, JobSet attempts plus checkpoint commit times (each checkpoint is a coarse "step" record).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from mtc_provider.core.basics.payload import Payload
from mtc_provider.core.attempt.outcomes import DISRUPTED, FAILED_OUTCOME, FINISHED

END_EVENTS = {"preempted": DISRUPTED, "error": FAILED_OUTCOME, "finish": FINISHED}


@dataclass(frozen=True)
class Attempt:
    start: float
    end: float
    outcome: str  # finished | disrupted | failed


@dataclass(frozen=True)
class StepRecord:
    """Training reached `step` at `end` (unix s) in attempt number `attempt` (index into Timeline.attempts)."""

    attempt: int
    step: int
    end: float


@dataclass(frozen=True)
class Restore:
    attempt: int
    step: int
    start: float
    end: float
    tier: str = "persistent"


@dataclass(frozen=True)
class Save:
    step: int
    start: float
    blocking_s: float = 0.0
    end: float | None = None
    tier: str = "persistent"


@dataclass
class Timeline:
    attempts: list[Attempt] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    restores: list[Restore] = field(default_factory=list)
    saves: list[Save] = field(default_factory=list)


@dataclass(frozen=True)
class GoodputReport(Payload):
    elapsed_s: float
    productive_s: float
    goodput: float
    badput_s: dict[str, float]
    recovery_s: list[float]
    disruptions: int
    last_productive_step: int | None
    ideal_step_s: float | None


def compute_goodput(timeline: Timeline) -> GoodputReport:
    """The report for a timeline; an empty timeline gives zero elapsed time and zero goodput."""
    attempts = timeline.attempts
    if not attempts:
        return GoodputReport(0.0, 0.0, 0.0, _badput(), [], 0, None, None)
    elapsed = max(a.end for a in attempts) - min(a.start for a in attempts)
    intervals = _step_intervals(timeline)  # (record, start, duration excluding blocking saves)
    later = [d for rec, start, d, first in intervals if not first]
    ideal = statistics.median(later) if later else None
    restored = _restored_step_after(timeline)
    badput = _badput()
    productive = 0.0
    last_productive: int | None = None
    for rec, start, duration, first in intervals:
        cutoff = restored.get(rec.attempt)  # the step the next attempt resumed from, if this one was disrupted
        useful = duration
        if first and ideal is not None and duration > ideal:
            badput["startup"] += duration - ideal  # compilation of the first step
            useful = ideal
        if cutoff is not None and rec.step > cutoff:
            badput["wasted_progress"] += useful
        else:
            productive += useful
            last_productive = rec.step if last_productive is None else max(last_productive, rec.step)
    for index, attempt in enumerate(attempts):
        begin = _training_begins(timeline, index)
        if begin is not None:
            badput["startup"] += max(0.0, min(begin, attempt.end) - attempt.start)
    badput["restore"] = sum(r.end - r.start for r in timeline.restores)
    badput["checkpoint_save"] = sum(s.blocking_s for s in timeline.saves)
    ordered = sorted(attempts, key=lambda a: a.start)
    badput["downtime"] = sum(max(0.0, b.start - a.end) for a, b in zip(ordered, ordered[1:]))
    badput["other"] = max(0.0, elapsed - productive - sum(v for k, v in badput.items() if k != "other"))
    recovery = [_recovery(timeline, i) for i, a in enumerate(attempts) if a.outcome != FINISHED and i + 1 < len(attempts)]
    disruptions = sum(1 for a in attempts[:-1] if a.outcome != FINISHED)
    return GoodputReport(elapsed, productive, productive / elapsed if elapsed > 0 else 0.0,
                         {k: round(v, 9) for k, v in badput.items()}, recovery, disruptions, last_productive, ideal)


def _badput() -> dict[str, float]:
    return dict.fromkeys(("startup", "restore", "checkpoint_save", "wasted_progress", "downtime", "other"), 0.0)


def _training_begins(timeline: Timeline, attempt: int) -> float | None:
    """When training (or its restore) starts in an attempt: the restore start, else the attempt start."""
    restores = [r.start for r in timeline.restores if r.attempt == attempt]
    return min(restores) if restores else None


def _resume_point(timeline: Timeline, attempt: int) -> float:
    restores = [r.end for r in timeline.restores if r.attempt == attempt]
    return max(restores) if restores else timeline.attempts[attempt].start


def _step_intervals(timeline: Timeline) -> list[tuple[StepRecord, float, float, bool]]:
    """Each step record with the span of work it closes: from the previous record (or the resume point)."""
    out = []
    for index in range(len(timeline.attempts)):
        records = sorted((s for s in timeline.steps if s.attempt == index), key=lambda s: s.end)
        previous = _resume_point(timeline, index)
        for position, rec in enumerate(records):
            blocking = sum(s.blocking_s for s in timeline.saves if previous <= s.start < rec.end)
            out.append((rec, previous, max(0.0, rec.end - previous - blocking), position == 0))
            previous = rec.end
    return out


def _restored_step_after(timeline: Timeline) -> dict[int, int]:
    """For each disrupted attempt, the step the next attempt resumed from (0 when it started over)."""
    out = {}
    for index, attempt in enumerate(timeline.attempts[:-1]):
        if attempt.outcome == FINISHED:
            continue
        restores = [r.step for r in timeline.restores if r.attempt == index + 1]
        out[index] = max(restores) if restores else 0
    return out


def _recovery(timeline: Timeline, index: int) -> float:
    return _resume_point(timeline, index + 1) - timeline.attempts[index].end


def timeline_from_workload_events(events: Iterable[Mapping[str, Any]], process: int | None = None) -> Timeline:
    """The local workload's events (ts, event, process, step, tier, duration_s, blocking_s) as a Timeline.

    A save's blocking time comes from its `save_blocking` event (or a `blocking_s` on `save_start`).

    Only one process is read (the lowest id unless given): every process records the same steps. An attempt
    starts at `start`; it ends at `preempted`/`error`/`finish`, or at its last event when the process was killed.
    """
    events = [e for e in events if "ts" in e and "event" in e]
    if process is None:
        ids = [e.get("process") for e in events if e.get("process") is not None]
        process = min(ids) if ids else None
    events = sorted((e for e in events if e.get("process") == process), key=lambda e: float(e["ts"]))
    timeline = Timeline()
    current: dict[str, Any] | None = None

    def close(end: float, outcome: str) -> None:
        timeline.attempts.append(Attempt(current["start"], end, outcome))

    for e in events:
        ts, kind = float(e["ts"]), e["event"]
        if kind == "start":
            if current is not None:
                close(current["last"], DISRUPTED)
            current = {"start": ts, "last": ts}
            continue
        if current is None:
            current = {"start": ts, "last": ts}
        current["last"] = ts
        attempt = len(timeline.attempts)
        if kind == "step":
            timeline.steps.append(StepRecord(attempt, int(e["step"]), ts))
        elif kind == "restore":
            duration = float(e.get("duration_s") or 0.0)
            timeline.restores.append(Restore(attempt, int(e["step"]), ts - duration, ts, e.get("tier", "persistent")))
        elif kind == "save_start":
            timeline.saves.append(Save(int(e["step"]), ts, float(e.get("blocking_s") or 0.0), None, e.get("tier", "persistent")))
        elif kind == "save_blocking":  # written once the save stopped blocking training (the workloads)
            _set_blocking(timeline, int(e["step"]), e.get("tier", "persistent"), float(e.get("blocking_s") or 0.0))
        elif kind in END_EVENTS:
            close(ts, END_EVENTS[kind])
            current = None
    if current is not None:
        close(current["last"], DISRUPTED)
    return timeline


def _set_blocking(timeline: Timeline, step: int, tier: str, blocking_s: float) -> None:
    """The blocking time of the newest save of `step` in `tier` (its `save_start` came first)."""
    from dataclasses import replace

    for index in range(len(timeline.saves) - 1, -1, -1):
        save = timeline.saves[index]
        if save.step == step and save.tier == tier:
            timeline.saves[index] = replace(save, blocking_s=blocking_s)
            return


def timeline_from_checkpoints(attempts: Iterable[Attempt], checkpoints: Iterable[tuple[int, float]],
                              restores: Iterable[Restore] = ()) -> Timeline:
    """A coarse Timeline for GKE: attempts (from JobSet restarts) and (step, commit time) of checkpoints.

    Each checkpoint becomes a step record in the attempt whose span holds its commit time.
    """
    attempts = sorted(attempts, key=lambda a: a.start)
    timeline = Timeline(attempts=list(attempts), restores=list(restores))
    for step, commit in sorted(checkpoints, key=lambda c: c[1]):
        for index, attempt in enumerate(attempts):
            if attempt.start <= commit <= attempt.end:
                timeline.steps.append(StepRecord(index, step, commit))
                break
    return timeline
