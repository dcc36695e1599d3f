"""A run's record (its attempt history, kept beside its checkpoints) and the one-line summary `mtc list` shows (pure).

The attempt journal (adapters.attempt_journal, for either end of a try) writes the record (adapters.run_records)
when an attempt is submitted and when it ends, with the run lock's attempt records (core.attempt.attempt_records'
`AttemptRecord`). The run's state is the operator's last word: `running` while an
attempt goes on, `retrying` between attempts, `succeeded` or `failed` when the run ended.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from mtc_provider.core.measure.progress import ProgressTracker
from mtc_provider.core.measure.progress_report import format_duration, progress_report

RECORD_FILE = "mtc-attempts.json"
RECORD_VERSION = 1
RUNNING, RETRYING, SUCCEEDED, FAILED = "running", "retrying", "succeeded", "failed"
STATES = (RUNNING, RETRYING, SUCCEEDED, FAILED)
ENDED_STATES = (SUCCEEDED, FAILED)


def record_path(checkpoint_dir: str) -> str:
    """`<base>/<run_name>/mtc-attempts.json` for `<base>/<run_name>/checkpoints`: beside the checkpoints."""
    parent = checkpoint_dir.rstrip("/").rsplit("/", 1)[0]
    return f"{parent}/{RECORD_FILE}"


def run_record(*, run_name: str, namespace: str, checkpoint_dir: str, target_step: int | None, state: str,
               attempts: Sequence[Mapping[str, Any]], owner: Mapping[str, Any], now: float, reason: str = "",
               progress: Mapping[str, Any] | None = None, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The record to write. `previous`: the record already there, whose progress figures are kept when no newer
    ones came (an attempt's end carries none), and whose attempts are kept when this writer no longer sees them:
    a try that starts after the run lock was released (a task re-run by the scheduler after its worker's report
    was lost, taking the ended JobSet's result) reads a fresh lock with no history."""
    if state not in STATES:
        raise ValueError(f"state {state!r}: one of {', '.join(STATES)}")
    same_run = previous is not None and previous.get("dag_run") == {
        "dag_id": owner.get("dag_id"), "run_id": owner.get("run_id"), "task_id": owner.get("task_id")}
    kept_progress = (previous or {}).get("progress") if same_run else None
    return {"version": RECORD_VERSION, "run_name": run_name, "namespace": namespace, "checkpoint_dir": checkpoint_dir,
            "target_step": target_step, "state": state, "reason": reason,
            "dag_run": {"dag_id": owner.get("dag_id"), "run_id": owner.get("run_id"), "task_id": owner.get("task_id")},
            "attempts": merged_attempts((previous or {}).get("attempts") or [] if same_run else [], attempts),
            "progress": dict(progress) if progress else kept_progress, "updated": now}


def merged_attempts(kept: Sequence[Mapping[str, Any]], seen: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The attempts of both lists, one per JobSet: what this writer saw wins over what was kept; by attempt."""
    by_jobset = {a.get("jobset"): dict(a) for a in kept}
    by_jobset.update({a.get("jobset"): dict(a) for a in seen})
    return sorted(by_jobset.values(), key=lambda a: (a.get("attempt") or 0, a.get("start") or 0.0))


def _started(record: Mapping[str, Any]) -> float | None:
    starts = [a.start for a in record.get("attempts") or [] if a.start is not None]
    return min(starts) if starts else None


def newest_step(record: Mapping[str, Any], finalized: Sequence[int] | None = None) -> int | None:
    """The newest finalized step: from a listing when given, else the newest the records or progress saw.
    `record`: a run record as read, its attempts typed (core.attempt.attempt_records.read_attempts)."""
    if finalized:
        return max(finalized)
    seen = [a.last_step for a in record.get("attempts") or []]
    seen.append((record.get("progress") or {}).get("latest_step"))
    steps = [s for s in seen if isinstance(s, int) and not isinstance(s, bool)]
    return max(steps) if steps else None


def eta_seconds(record: Mapping[str, Any], commits: Iterable[tuple[int, float | None]], now: float) -> float | None:
    """Seconds to the target step at the rate of the newest checkpoints (core.measure.progress); None when unknown or
    the run ended."""
    target = record.get("target_step")
    if record.get("state") in ENDED_STATES or not isinstance(target, int):
        return None
    tracker = ProgressTracker(started_at=now)
    for step, commit_time in sorted(commits, key=lambda c: c[0]):
        tracker.observe(step, commit_time, commit_time if commit_time is not None else now)
    report = progress_report(tracker.latest_step, target, tracker.steps_per_hour(now), tracker.latest_step, 0, 0)
    return report.eta_seconds


def summary(record: Mapping[str, Any], now: float, commits: Sequence[tuple[int, float | None]] = (),
            live_jobsets: Sequence[str] = ()) -> dict[str, Any]:
    """One row of `mtc list`: run, state, step of target, ETA, attempts, age (seconds since its first attempt).
    `record`: as `newest_step` takes it."""
    started = _started(record)
    attempts = record.get("attempts") or []
    return {"run_name": record.get("run_name"), "namespace": record.get("namespace"), "state": record.get("state"),
            "step": newest_step(record, [s for s, _ in commits]), "target_step": record.get("target_step"),
            "eta_s": eta_seconds(record, commits, now), "attempts": len(attempts),
            "restarts": sum(a.restarts for a in attempts),
            "age_s": None if started is None else max(0.0, now - started), "live_jobsets": list(live_jobsets),
            "dag_run": record.get("dag_run"), "checkpoint_dir": record.get("checkpoint_dir")}


def summary_cells(row: Mapping[str, Any]) -> list[str]:
    """The text columns of a summary row: RUN STATE STEP ETA ATTEMPTS AGE."""
    step = "-" if row["step"] is None else str(row["step"])
    if row.get("target_step") is not None:
        step = f"{step}/{row['target_step']}"
    eta = "-" if row["eta_s"] is None else format_duration(row["eta_s"])
    age = "-" if row["age_s"] is None else format_duration(row["age_s"])
    return [str(row["run_name"]), str(row["state"]), step, eta, str(row["attempts"]), age]
