"""What the launch operator does this try, from this task's JobSets (plain dicts) and the run's step history.

Pure: the operator lists the JobSets, reads the newest finalized step when asked (`needs_latest_step`), and
acts on the returned `LaunchPlan` (reattach, wait for a deletion, take a result, or delete and submit).
Every attempt is labelled with its attempt number (and the try that submitted it) and annotated with the step history it started with, so a
retry that lost the run lock's record can still carry the history on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from mtc_provider.core.attempt.resubmission import (REATTACH, SUBMIT, TAKE_RESULT, WAIT_DELETION, plan_try,
                                                    restorable_progress)
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_provider.core.basics.labels import TRY_NUMBER, attempt_number
from mtc_provider.core.basics.vocabulary import STEP_HISTORY_ANNOTATION

__all__ = ["REATTACH", "SUBMIT", "TAKE_RESULT", "WAIT_DELETION", "LaunchPlan", "attempt_of", "history_of",
           "kept_failed", "needs_latest_step", "next_attempt", "open_attempt_of_try", "plan_launch"]


def attempt_of(jobset: Mapping[str, Any]) -> int:
    """The attempt number a JobSet was labelled with (core.basics.labels.attempt_number; 0 when it has none)."""
    return attempt_number(jobset.get("metadata", {}).get("labels"))


def next_attempt(jobsets: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]], try_number: int) -> int:
    """The number of the attempt to submit now: above every attempt this task's JobSets and the run lock's records
    know (a deleted attempt keeps its record), and never below the try number (JobSets named by try before)."""
    seen = [attempt_of(j) for j in jobsets]
    seen += [int(r["attempt"]) for r in records if isinstance(r.get("attempt"), int)]
    return max([try_number, *(n + 1 for n in seen)])


def kept_failed(jobsets: Sequence[Mapping[str, Any]], keep: int) -> set[str]:
    """The names of the newest `keep` failed JobSets among these ended attempts (by attempt number): what
    keep_failed_attempts keeps when ended attempts are deleted (the launch, the trigger's next attempt, the
    teardown)."""
    from mtc_provider.core.attempt.status import FAILED

    failed = sorted((o for o in jobsets if evaluate_jobset(o).phase == FAILED), key=attempt_of)
    return {o["metadata"]["name"] for o in failed[len(failed) - keep:]} if keep > 0 else set()


def open_attempt_of_try(jobsets: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]],
                        try_number: int) -> Mapping[str, Any] | None:
    """This try's newest attempt while its end is not yet decided (its record in the run lock still open, or no
    record at all): an ended one decides the try. An attempt this try already closed and followed (interrupted
    after progress) is not: the try submits the next one."""
    mine = [j for j in jobsets if str((j["metadata"].get("labels") or {}).get(TRY_NUMBER)) == str(try_number)]
    if not mine:
        return None
    newest = max(mine, key=attempt_of)
    record = next((r for r in records if r.get("jobset") == newest["metadata"]["name"]), None)
    return newest if record is None or record.get("end") is None else None


def history_of(jobset: Mapping[str, Any]) -> list[int | None]:
    """The step history an attempt started with (its annotation; [] when missing or unreadable)."""
    raw = (jobset.get("metadata", {}).get("annotations") or {}).get(STEP_HISTORY_ANNOTATION, "[]")
    try:
        history = json.loads(raw)
    except ValueError:
        return []
    return [s if isinstance(s, int) else None for s in history] if isinstance(history, list) else []


@dataclass(frozen=True)
class LaunchPlan:
    kind: str  # REATTACH | WAIT_DELETION | TAKE_RESULT | SUBMIT
    name: str = ""  # REATTACH / TAKE_RESULT: the attempt's JobSet
    attempt: int = 0  # REATTACH / TAKE_RESULT: its try number
    history: tuple[int | None, ...] = ()  # the step history to carry on; SUBMIT: ends with `start_step`
    waiting_for: tuple[str, ...] = ()  # WAIT_DELETION: the terminating attempts
    to_delete: tuple[str, ...] = ()  # SUBMIT: the ended attempts to delete first (never their checkpoints)
    start_step: int | None = None  # SUBMIT: the newest finalized step the new attempt starts from


def _ended_last_step(records: Sequence[Mapping[str, Any]]) -> int | None:
    """The `last_step` of the newest ended attempt record, or None."""
    ended = [r for r in records if r.get("end") is not None and isinstance(r.get("attempt"), int)]
    step = max(ended, key=lambda r: r["attempt"]).get("last_step") if ended else None
    return step if isinstance(step, int) else None


def needs_latest_step(jobsets: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `plan_launch` reads `latest_step`: only when no attempt is live or terminating (one that is
    may still write checkpoints, so a listing now would be stale, and is not needed)."""
    return not any(s.live or s.terminating for s in map(evaluate_jobset, jobsets))


def plan_launch(jobsets: Sequence[Mapping[str, Any]], lock_history: Sequence[int | None], latest_step: int | None,
                target_step: int, completion: bool = False, records: Sequence[Mapping[str, Any]] = ()) -> LaunchPlan:
    """This task's JobSets (any order) -> what this try does.

    `lock_history`: the step history the run lock holds ([] when it holds none: then the newest attempt's
    annotation is used). `latest_step`: the newest finalized step (read only when `needs_latest_step`).
    `completion`: the JobSet's own completion is the result (no target step). `records`: the run lock's attempt
    records; a new attempt starts from the restorable progress the newest ended one reached (its `last_step`: a
    step its pods restored may be newer than any finalized one), so a start that restores no further counts as
    no progress.
    """
    ordered = sorted(jobsets, key=attempt_of)
    by_name = {o["metadata"]["name"]: o for o in ordered}
    needed = needs_latest_step(ordered)
    listed = latest_step if needed else None
    plan = plan_try([evaluate_jobset(o) for o in ordered], listed, target_step, completion)
    start_step = restorable_progress(listed, _ended_last_step(records)) if needed else None
    history = list(lock_history) or (history_of(ordered[-1]) if ordered else [])
    if plan.kind == WAIT_DELETION:
        return LaunchPlan(WAIT_DELETION, waiting_for=plan.waiting_for)
    if plan.kind == REATTACH:
        obj = by_name[plan.name]
        return LaunchPlan(REATTACH, plan.name, attempt_of(obj), tuple(history or history_of(obj)))
    if plan.kind == TAKE_RESULT:
        return LaunchPlan(TAKE_RESULT, plan.name, attempt_of(by_name[plan.name]), tuple(history or [None]))
    return LaunchPlan(SUBMIT, history=(*history, start_step), to_delete=plan.to_delete, start_step=start_step)
