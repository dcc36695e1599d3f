"""The resubmission decision: when a JobSet attempt ends, succeed, retry (resubmit) or fail for good.

Pure and table-tested. Completion is decided by checkpoint progress, never by exit codes: MaxText
exits 0 when preempted, so "Completed" below the target step is a retry. A run that makes no
checkpoint progress across `crash_loop_attempts` consecutive attempts is a crash loop and fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.attempt.status import FAILED, SUCCEEDED, JobSetState

SUCCEED = "succeed"
RETRY = "retry"
FAIL = "fail"
DEFAULT_CRASH_LOOP_ATTEMPTS = 2

# API answers to a create that no resubmission can fix: malformed, forbidden, CRD missing, invalid.
REJECTED_STATUSES = frozenset({400, 403, 404, 405, 415, 422})


@dataclass(frozen=True)
class Decision:
    kind: str  # succeed | retry | fail
    reason: str


def _progress_value(step: int | None) -> int:
    return -1 if step is None else step


def restorable_progress(latest_step: int | None, restored_step: int | None) -> int | None:
    """What the next start can resume from: the newest finalized (persistent or complete replicator) step, or a
    newer step a start of the pods in this attempt restored (MaxText's restore line, from any tier: how the local
    tier's progress is seen on GKE)."""
    known = [step for step in (latest_step, restored_step) if step is not None]
    return max(known) if known else None


def _reached(latest_step: int | None, target_step: int, restored_step: int | None) -> str:
    restored = "" if restored_step is None else f", newest restored step {restored_step}"
    return f"last finalized step {latest_step}{restored}, target {target_step}"


def attempts_without_progress(step_history: Sequence[int | None], latest_step: int | None) -> int:
    """Consecutive attempts, newest first, whose end step did not pass their start step."""
    steps = [_progress_value(s) for s in step_history] + [_progress_value(latest_step)]
    count = 0
    for before, after in zip(reversed(steps[:-1]), reversed(steps[1:])):
        if after > before:
            break
        count += 1
    return count


def _crash_loop(step_history: Sequence[int | None], latest_step: int | None, restored_step: int | None,
                crash_loop_attempts: int, last: str, reached: str) -> Decision | None:
    stuck = attempts_without_progress(step_history, restorable_progress(latest_step, restored_step))
    if stuck < crash_loop_attempts:
        return None
    return Decision(FAIL, f"crash loop: no restorable progress across {stuck} consecutive attempts{last} (steps at "
                          f"attempt starts {list(step_history)}, {reached})")


def decide(state: JobSetState, latest_step: int | None, target_step: int, step_history: Sequence[int | None],
           crash_loop_attempts: int = DEFAULT_CRASH_LOOP_ATTEMPTS, restored_step: int | None = None) -> Decision:
    """Decide what an ended attempt means.

    `step_history` holds the restorable step at the start of each attempt so far, oldest first; its last entry is
    the start of the attempt that just ended (None: no checkpoint yet). Only a finalized checkpoint at the target
    succeeds; the crash-loop guard also counts `restored_step`, the newest step a start of the pods in this attempt
    restored (`restorable_progress`): a run whose in-cluster restarts resume from ever newer local saves trains.
    """
    if state.phase not in (SUCCEEDED, FAILED):
        raise SpecError("state.phase", state.phase, f"an ended JobSet ({SUCCEEDED} or {FAILED})")
    if isinstance(crash_loop_attempts, bool) or not isinstance(crash_loop_attempts, int) or crash_loop_attempts < 1:
        raise SpecError("crash_loop_attempts", crash_loop_attempts, "an integer >= 1")
    if not step_history:
        raise SpecError("step_history", list(step_history), "at least the step at the start of this attempt")
    reached = _reached(latest_step, target_step, restored_step)
    if latest_step is not None and latest_step >= target_step:
        return Decision(SUCCEED, f"training reached its target ({reached})")
    if state.phase == FAILED and not state.retryable:
        return Decision(FAIL, f"non-retryable failure: {state.reason}: {state.message} ({reached})")
    loop = _crash_loop(step_history, latest_step, restored_step, crash_loop_attempts, "", reached)
    if loop is not None:
        return loop
    if state.phase == SUCCEEDED:
        return Decision(RETRY, f"completed below target, likely preempted ({reached}); resubmitting to resume")
    return Decision(RETRY, f"failed after {state.restarts} in-cluster restarts: {state.reason} ({reached}); resubmitting")


def progressed(step_history: Sequence[int | None], latest_step: int | None) -> bool:
    """Whether the attempt that just ended passed the step it started from (the last entry of `step_history`)."""
    return attempts_without_progress(list(step_history) or [None], latest_step) == 0


def resubmit_in_try(decision: Decision, step_history: Sequence[int | None], latest_step: int | None) -> bool:
    """Whether the same Airflow try submits the next attempt (no retry spent): a retry after progress.

    An attempt interrupted after it made progress (a graceful preemption or maintenance, a host loss that used up
    the in-cluster restarts, a stall after new steps) is an interruption the run survived, not a failed try: a
    week-long run interrupted hourly must not run out of a fixed count of retries. Airflow 3.3's RetryPolicy
    cannot give more tries than `retries` (airflow.sdk.definitions.retry_policy: it "cannot extend past the
    configured maximum"), so the try itself goes on. Only attempts without progress spend Airflow retries, and
    the crash-loop guard (`crash_loop_attempts` consecutive attempts without progress) still ends the run.
    """
    return decision.kind == RETRY and progressed(step_history, latest_step)


def in_try_line(reason: str, start_step: int | None, latest_step: int | None, next_attempt: int,
                target_step: int | None = None) -> str:
    """The one line that says an interrupted attempt is followed in the same try:

        resubmitting in this try (attempt 5 next; no Airflow retry spent: the attempt progressed from step 40 to
        57): completed below target, likely preempted (...); the next attempt resumes from step 57 of 70
    """
    target = f" of {target_step}" if target_step is not None else ""
    why = _without_tail(reason)
    start = "no checkpoint" if start_step is None else f"step {start_step}"
    return (f"resubmitting in this try (attempt {next_attempt} next; no Airflow retry spent: the attempt progressed "
            f"from {start} to step {latest_step}): {why}; the next attempt resumes from step {latest_step}{target} "
            "(the newest restorable checkpoint)")


def decide_rejected(status: int, message: str) -> Decision:
    """A create the API refused: invalid spec or permissions fail for good; throttling and 5xx retry."""
    if status in REJECTED_STATUSES:
        return Decision(FAIL, f"JobSet rejected by the API (HTTP {status}): {message}")
    return Decision(RETRY, f"JobSet create failed (HTTP {status}): {message}")


def decide_on_completion(state: JobSetState) -> Decision:
    """A one-shot JobSet (e.g. an evaluation): done when it completes; no checkpoint progress is involved.

    Unlike training, "Completed" is success here: the job is short and has no target step to resume to.
    """
    if state.phase not in (SUCCEEDED, FAILED):
        raise SpecError("state.phase", state.phase, f"an ended JobSet ({SUCCEEDED} or {FAILED})")
    if state.phase == SUCCEEDED:
        return Decision(SUCCEED, f"JobSet completed after {state.restarts} in-cluster restarts")
    if not state.retryable:
        return Decision(FAIL, f"non-retryable failure: {state.reason}: {state.message}")
    return Decision(RETRY, f"failed after {state.restarts} in-cluster restarts: {state.reason}; resubmitting")


# --- what to do this try -----------------------------------------------------------------------------------
REATTACH = "reattach"  # a live attempt exists: follow it, create nothing
WAIT_DELETION = "wait-deletion"  # an attempt is still terminating: its pods may still write; wait, then plan again
TAKE_RESULT = "take-result"  # the newest attempt ended and training is already done: decide on it
SUBMIT = "submit"  # delete the ended attempts (never the checkpoints) and submit the next one


@dataclass(frozen=True)
class TryPlan:
    kind: str
    name: str = ""  # the attempt to reattach to / take the result of
    waiting_for: tuple[str, ...] = ()  # terminating attempts
    to_delete: tuple[str, ...] = ()  # ended attempts to delete before submitting


def plan_try(attempts: Sequence[JobSetState], latest_step: int | None, target_step: int,
             completion: bool = False) -> TryPlan:
    """This task's attempts (oldest first) -> what this try does.

    A terminating attempt (deletionTimestamp set) is never live: reattaching to it would only see it vanish.
    The newest ended attempt is a result when training already reached its target, whether it ended
    Completed or Failed (a Failed attempt past the target is done, not resubmitted); in completion mode
    only a Completed one is.
    """
    live = [a for a in attempts if a.live]
    if live:
        return TryPlan(REATTACH, live[-1].name)
    terminating = tuple(a.name for a in attempts if a.terminating)
    if terminating:
        return TryPlan(WAIT_DELETION, waiting_for=terminating)
    if attempts:
        newest = attempts[-1]
        reached = latest_step is not None and latest_step >= target_step
        if (newest.phase == SUCCEEDED if completion else reached):
            return TryPlan(TAKE_RESULT, newest.name)
    return TryPlan(SUBMIT, to_delete=tuple(a.name for a in attempts))


def decide_stalled(latest_step: int | None, target_step: int, step_history: Sequence[int | None],
                   crash_loop_attempts: int = DEFAULT_CRASH_LOOP_ATTEMPTS, why: str = "stalled",
                   restored_step: int | None = None) -> Decision:
    """An attempt that stopped making checkpoint progress (it is deleted either way).

    It counts like a failed attempt for the crash-loop guard: hangs at one step stop after
    `crash_loop_attempts` attempts, not after every retry.
    """
    if not step_history:
        raise SpecError("step_history", list(step_history), "at least the step at the start of this attempt")
    reached = _reached(latest_step, target_step, restored_step)
    if latest_step is not None and latest_step >= target_step:
        return Decision(SUCCEED, f"training reached its target ({reached})")
    loop = _crash_loop(step_history, latest_step, restored_step, crash_loop_attempts, f", the last {why}", reached)
    return loop or Decision(RETRY, f"{why} ({reached}); resubmitting")


def resubmission_line(reason: str, resume_step: int | None, try_number: int, max_tries: int | None,
                      target_step: int | None = None) -> str:
    """The one line that says an attempt ended as expected and the next one follows (not an error):

        resubmitting (try 3 of 7 next): the JobSet failed ...; the next attempt resumes from step 1200 of 5000
        (the newest restorable checkpoint)
    """
    of = f" of {max_tries + 1}" if max_tries is not None else ""
    target = f" of {target_step}" if target_step is not None else ""
    resume = (f"resumes from step {resume_step}{target} (the newest restorable checkpoint)" if resume_step is not None
              else "starts from step 0 (no finalized checkpoint yet)")
    return f"resubmitting (try {try_number + 1}{of} next): {_without_tail(reason)}; the next attempt {resume}"


def _without_tail(reason: str) -> str:
    """A decision's reason without its own "; resubmitting" tail: the line says it first."""
    why = reason.rstrip(". ")
    for said in ("; resubmitting to resume", "; resubmitting"):
        why = why[:-len(said)] if why.endswith(said) else why
    return why
