"""What a long run shows while it trains (pure): one progress line and its XCom, and bounded pod-log tails.

    step 1200 of 5000 (24%), 410 steps/h, ETA 9h16m, newest checkpoint 1100, restarts so far 2 (attempt 1);
    step from the workload log

The step is the workload's own (its `completed step` log line, or the local workload's events: core.measure.step_log)
when one was seen, else the newest finalized checkpoint; `source` says which. The same figures go to the XCom, so
a dashboard or a downstream task reads numbers, not text (keys are only ever added, never renamed). Pod logs are
bounded here too (lines and bytes), so one chatty pod can never flood a task log.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_TAIL_LINES = 50
DEFAULT_TAIL_BYTES = 16_384


def format_duration(seconds: float | None) -> str:
    """`2d3h`, `9h16m`, `4m10s`, `12s`; '?' when unknown."""
    if seconds is None or seconds < 0:
        return "?"
    total = int(round(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


@dataclass(frozen=True)
class ProgressReport:
    """One progress observation of a training attempt."""

    step: int | None
    target_step: int
    steps_per_hour: float | None
    eta_seconds: float | None
    newest_checkpoint: int | None
    restarts: int
    attempt: int
    source: str | None = None  # core.measure.step_log: workload-log | workload-events | checkpoints; None: no step yet
    updated_at: float | None = None  # unix time of the observation

    @property
    def percent(self) -> float | None:
        return None if self.step is None else round(100.0 * min(self.step, self.target_step) / self.target_step, 1)

    def line(self) -> str:
        step = "no step yet" if self.step is None else f"step {self.step} of {self.target_step} ({self.percent:g}%)"
        rate = "rate unknown" if self.steps_per_hour is None else f"{self.steps_per_hour:.0f} steps/h"
        newest = "none yet" if self.newest_checkpoint is None else str(self.newest_checkpoint)
        source = f"; step from the {self.source.replace('-', ' ')}" if self.source else ""
        return (f"{step}, {rate}, ETA {format_duration(self.eta_seconds)}, newest checkpoint {newest}, "
                f"restarts so far {self.restarts} (attempt {self.attempt}){source}")

    def to_xcom(self) -> dict[str, Any]:
        return {**asdict(self), "percent": self.percent}


def progress_report(step: int | None, target_step: int, steps_per_hour: float | None, newest_checkpoint: int | None,
                    restarts: int = 0, attempt: int = 1, source: str | None = None,
                    updated_at: float | None = None) -> ProgressReport:
    """The report for `step` (the workload's step, from `source`), else for the newest checkpoint."""
    from mtc_provider.core.measure.step_log import FROM_CHECKPOINTS

    current = step if step is not None else newest_checkpoint
    if step is None:
        source = FROM_CHECKPOINTS if newest_checkpoint is not None else None
    eta = None
    if current is not None and current >= target_step:
        eta = 0.0
    elif current is not None and steps_per_hour:
        eta = (target_step - current) * 3600.0 / steps_per_hour
    rate = None if steps_per_hour is None else round(steps_per_hour, 1)
    return ProgressReport(current, target_step, rate, eta, newest_checkpoint, restarts, attempt, source, updated_at)


def tail(text: str, max_lines: int = DEFAULT_TAIL_LINES, max_bytes: int = DEFAULT_TAIL_BYTES) -> str:
    """The last `max_lines` lines of `text`, at most `max_bytes` of them (cut at a line start)."""
    lines = text.splitlines()[-max_lines:] if max_lines > 0 else []
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line.encode("utf-8", "replace")) + 1
        if size > max_bytes:
            break
        kept.append(line)
    return "\n".join(reversed(kept))


def failed_pod_section(pod: str, reason: str, log_tail: str) -> list[str]:
    """Lines for the task log: a header naming the pod and why it failed, then its log's tail, then a footer."""
    body = log_tail.splitlines() or ["(the pod wrote no log)"]
    return [f"----- failed pod {pod} ({reason or 'failed'}): last {len(log_tail.splitlines())} log lines -----",
            *body, f"----- end of {pod} -----"]
