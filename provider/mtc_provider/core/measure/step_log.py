"""The training step from the workload's own output (pure): MaxText's per-step log line, and its bounds.

MaxText logs one line per training step through `max_logging.log` (AI-Hypercomputer/maxtext
src/MaxText/metric_logger.py, `MetricLogger.log_metrics`):

    completed step: {step}, seconds: {step_time:.3f}, TFLOP/s/device: {tflops:.3f}, Tokens/s/device: {tokens:.3f},
    total_weights: {total_weights}, loss: {loss:.3f}

(older releases: `completed step: N, seconds: X, TFLOP/s/device: Y, loss: Z`; absl may prefix
`I1201 11:00:00.123456 1 metric_logger.py:196] `). The local workload prints the same first fields
(`completed step: N, seconds: X, loss: Y`: rehearsal/mtc_local/workload/training.py), so one parser reads both.
Step N is the state after N updates: the number a checkpoint of that state carries, so a step from the log and a
checkpoint step compare directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

STEP_LINE = re.compile(r"\bcompleted step: (?P<step>\d+)(?:, seconds: (?P<seconds>[0-9]+(?:\.[0-9]*)?))?")
LOSS = re.compile(r"(?:^|[ ,])loss: (?P<loss>-?(?:[0-9]+(?:\.[0-9]*)?(?:e[-+]?[0-9]+)?|nan|inf))")

# Where a progress figure's step comes from (the `source` of core.measure.progress_report.ProgressReport).
FROM_LOG = "workload-log"  # the leader pod's "completed step" lines
FROM_EVENTS = "workload-events"  # the local workload's event files (`step` events)
FROM_CHECKPOINTS = "checkpoints"  # the newest finalized checkpoint (the fallback)


@dataclass(frozen=True)
class StepLine:
    """One `completed step` line: the step reached, that step's seconds, and the loss when printed."""

    step: int
    seconds: float | None = None
    loss: float | None = None


def parse_step_line(line: str) -> StepLine | None:
    """The step of a MaxText (or local workload) `completed step:` line; None for any other line."""
    found = STEP_LINE.search(line)
    if found is None:
        return None
    loss = LOSS.search(line[found.end():])
    seconds = float(found["seconds"]) if found["seconds"] is not None else None
    return StepLine(int(found["step"]), seconds, float(loss["loss"]) if loss else None)


def latest_step_line_at(stamped: Iterable[tuple[str, str]]) -> tuple[StepLine, float | None] | None:
    """The last `completed step` line among (timestamp, line) pairs, with its time (unix s; None when the
    timestamp does not parse), or None. Kubernetes prefixes each log line with its RFC 3339 time when asked
    (`timestamps=true`: adapters.pod_logs.LeaderLogFollower)."""
    for stamp, line in reversed(list(stamped)):
        parsed = parse_step_line(line)
        if parsed is not None:
            return parsed, log_timestamp(stamp)
    return None


def log_timestamp(stamp: str) -> float | None:
    """Unix seconds of a Kubernetes log timestamp (`2026-12-02T07:55:01.960997123Z`: RFC 3339, nanoseconds), or None
    when it is not one (a time without its zone included: its instant is unknown).

    dateutil's ISO 8601 parser: Python 3.10's `fromisoformat` takes neither `Z` nor nine fraction digits."""
    from dateutil.parser import isoparse

    try:
        parsed = isoparse(stamp.strip())
    except (ValueError, OverflowError):
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None


def latest_step_line(lines: Iterable[str]) -> StepLine | None:
    """The last `completed step` line among `lines` (the newest step the workload reported), or None."""
    latest = None
    for line in lines:
        parsed = parse_step_line(line)
        if parsed is not None:
            latest = parsed
    return latest


def bounded_lines(lines: list[str], max_lines: int, max_bytes: int) -> tuple[list[str], int]:
    """The newest lines that fit `max_lines` and `max_bytes` (UTF-8, a newline each), and how many were left out.

    A single line longer than the byte bound is cut to it (marked with `...`), so one huge line still shows.
    """
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-max_lines:] if max_lines > 0 else []):
        encoded = len(line.encode("utf-8", "replace")) + 1
        if size + encoded > max_bytes:
            if not kept and max_bytes > 4:
                kept.append(line.encode("utf-8", "replace")[:max_bytes - 4].decode("utf-8", "ignore") + "...")
            break
        kept.append(line)
        size += encoded
    return list(reversed(kept)), len(lines) - len(kept)


# MaxText logs the checkpoint it resumes from before training (src/MaxText/checkpointing.py,
# `load_state_if_possible`: `max_logging.log(f"restoring from this run's directory step {step}")`); the line names no
# tier (its emergency and replicator managers restore through the same call).
RESTORE_LINE = re.compile(r"\brestoring from this run's directory step (?P<step>\d+)")


def parse_restore_line(line: str) -> int | None:
    """The step of MaxText's restore line; None for any other line."""
    found = RESTORE_LINE.search(line)
    return int(found["step"]) if found else None


# After the restore, where the workload says it (the local workloads: rehearsal/mtc_local/workload/checkpointing.py),
# the tier it restored from and how long it took; MaxText's own line above names neither.
RESTORED_LINE = re.compile(r"\brestored step (?P<step>\d+) from tier (?P<tier>[a-z]+)"
                           r"(?: in (?P<seconds>[0-9]+(?:\.[0-9]*)?)s)?")
# A save as the local workloads log it: `saved step 40 (tiers: local,persistent; blocking 0.012s)`.
SAVED_LINE = re.compile(r"\bsaved step (?P<step>\d+) \(tiers: (?P<tiers>[a-z,-]*)")


@dataclass(frozen=True)
class Restore:
    """A restore as a log line tells it: the step, and the tier and seconds when the line names them."""

    step: int
    tier: str | None = None
    seconds: float | None = None


def parse_restore(line: str) -> Restore | None:
    """The restore a line tells of: the tier and duration from the workload's `restored step N from tier T in Ss`,
    else the step alone from MaxText's `restoring from this run's directory step N`; None for any other line."""
    found = RESTORED_LINE.search(line)
    if found is not None:
        seconds = float(found["seconds"]) if found["seconds"] is not None else None
        return Restore(int(found["step"]), found["tier"], seconds)
    step = parse_restore_line(line)
    return Restore(step) if step is not None else None


def parse_saved_tiers(line: str) -> tuple[int, tuple[str, ...]] | None:
    """(step, tiers) of a workload's `saved step N (tiers: ...)` line; None for any other line."""
    found = SAVED_LINE.search(line)
    if found is None:
        return None
    return int(found["step"]), tuple(t for t in found["tiers"].split(",") if t and t != "-")
