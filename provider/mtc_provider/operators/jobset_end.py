"""The worker's end of an attempt, as plain functions the launch operator (operators.jobset `_apply_end`) calls, in
order: `settle` -> `judge` (the decision, by the rule the triggerer's end applies too) -> the attempt journal's close ->
`conclude` (succeed, fail for good, spend an Airflow retry, or NextAttemptInTry); `record_run` around them."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from mtc_provider.adapters.attempt_journal import (ATTEMPTS_XCOM_KEY, RUN_XCOM_KEY, AttemptJournal, RunRecordPlace,
                                                   logs_scope, write_run_record)
from mtc_provider.adapters.kubernetes import Forbidden
from mtc_provider.adapters.pod_logs import log_failed_pod_tails
from mtc_provider.adapters.retry import ApiUnreachable, PermissionDenied, Retryable, describe_failure
from mtc_provider.adapters.run_lock import ATTEMPTS, RunLock
from mtc_provider.core.attempt import ledger
from mtc_provider.core.attempt.attempt_records import REACHED_TARGET, AttemptEnd, end_of_attempt
from mtc_provider.core.attempt.budget import BudgetCheck
from mtc_provider.core.attempt.jobset_events import (API_UNREACHABLE, DELETED, ENDED, ERROR, FORBIDDEN, LISTING_FAILED,
                                                     NEXT_ATTEMPT_PENDING, STALLED, STARTUP_TIMEOUT, UNSTARTABLE,
                                                     JobSetEvent, stall_cause)
from mtc_provider.core.attempt.ownership import describe_owner, kill_verdict
from mtc_provider.core.attempt.resubmission import (FAIL, SUCCEED, Decision, decide, decide_on_completion,
                                                    decide_stalled)
from mtc_provider.core.attempt.run_summary import FAILED as FAILED_RUN, RETRYING, SUCCEEDED as SUCCEEDED_RUN
from mtc_provider.core.attempt.status import SUCCEEDED
from mtc_provider.core.basics import labels as L
from mtc_provider.core.basics import vocabulary as V
from mtc_provider.operators.jobset_failures import (JOBSET_KEPT_XCOM_KEY, NOT_AN_ATTEMPT, ApiUnreachableFailure,
                                                    JobSetAttemptFailed, NextAttemptInTry, OrchestratorFault,
                                                    WatchLost, forbidden, storage_forbidden)

KEPT_ON_LAST_TRY = ("no retry is left to reattach, so this try ends; the JobSet (which may still be training) and "
                    "the run lock are kept, and the teardown keeps them: clear the task once the cause is fixed to "
                    "reattach, or stop the run with mtc delete")
WATCH_FAILURES_XCOM_KEY = "mtc_watch_failures"  # failed triggers of this try (resume_execution's bound)
MAX_WATCH_FAILURES = 3


@dataclass(frozen=True)
class TryFacts:
    """What an attempt's end is judged with, from the try that ends it."""

    try_number: int
    max_tries: int | None
    last_try: bool
    completion: bool
    crash_loop_attempts: int


def max_tries(ti: Any, retries: int | None) -> int | None:
    return getattr(ti, "max_tries", None) or retries


def last_try(ti: Any, retries: int | None) -> bool:
    return ti.try_number > (max_tries(ti, retries) or 0)


def judge(facts: TryFacts, ev: JobSetEvent, latest: int | None, stalled: bool = False) -> tuple[Decision, AttemptEnd]:
    """The decision on an ended attempt (the trigger's verdict as it is, else core.attempt.resubmission's) and its
    end by the one rule the triggerer's end applies too (core.attempt.attempt_records.end_of_attempt: restorable
    progress, the run's budget, whether the same try follows). `latest`: the newest restorable step."""
    extra, history = ev.extra, ev.extra["history"] or [None]
    if stalled:
        decision = decide_stalled(latest, extra["target_step"], history, facts.crash_loop_attempts, why=ev.message,
                                  restored_step=ev.restored_step)
    elif ev.verdict is not None:
        decision = Decision(ev.verdict["kind"], ev.verdict["reason"])
    elif facts.completion:
        decision = decide_on_completion(ev.state)
    else:
        decision = decide(ev.state, latest, extra["target_step"], history, facts.crash_loop_attempts, ev.restored_step)
    return decision, end_of_attempt(
        decision, jobset=ev.name, namespace=ev.namespace, attempt=extra["attempt"], restarts=ev.restarts_seen,
        latest=latest, history=history, phase_succeeded=ev.state is not None and ev.state.phase == SUCCEEDED,
        try_number=facts.try_number, max_tries=facts.max_tries, target_step=extra["target_step"],
        last_try=facts.last_try, completion=facts.completion, stalled=stalled, restored=ev.restored_step,
        budget=BudgetCheck.from_dict(extra["budget"]) if extra.get("budget") else None, now=time.time(),
        steps_per_hour=(ev.progress or {}).get("steps_per_hour"))


def settle(ev: JobSetEvent, facts: TryFacts, latest: int | None, *, hook: Any, lock: RunLock,
           journal: AttemptJournal, log: Any, google: Callable[[], tuple[str, Any]]) -> Any:
    """Settle an attempt's end by its kind, and conclude. An ended JobSet and a stall are judged; a deletion outside
    the task and pods that cannot start fail the run for good; a listing that kept failing and a lost watch are the
    orchestrator's (the JobSet may train on: a retry reattaches)."""
    extra, attempt = ev.extra, ev.extra["attempt"]
    failed = lambda: AttemptEnd.failed(jobset=ev.name, namespace=ev.namespace, attempt=attempt,  # noqa: E731
                                       restarts=ev.restarts_seen, latest=latest, reason=ev.message)
    if ev.state is not None and ev.state.restarts > ev.restarts_seen:  # the JobSet's own count is the truth
        ev = dataclasses.replace(ev, restarts_seen=ev.state.restarts)
    if ev.kind == ENDED and ev.state is not None:
        decision, end = judge(facts, ev, latest)
        log.info("%s; newest finalized step %s of %s -> %s: %s", ev.state.describe(), latest, extra["target_step"],
                 decision.kind, decision.reason)
        if decision.kind != SUCCEED:  # why the attempt died, one click away: bounded tails of the failed pods
            log_failed_pod_tails(log, hook.api, ev.namespace, ev.name)
        return conclude(end, journal.close(end), facts.last_try, lock, log)
    if ev.kind == LISTING_FAILED:  # training goes on: a retry reattaches; a 403 needs the user
        journal.fault(attempt, latest)
        journal.report(ev.namespace, ev.name, attempt, ev.restarts_seen, latest, ev.message)
        if " 403" in ev.message or "HTTP 403" in ev.message:  # Airflow's identity: kept, like the cluster's 403
            raise storage_forbidden(PermissionDenied(ev.message), extra["checkpoint_dir"], *google())
        raise JobSetAttemptFailed(ev.message)
    if ev.kind == DELETED:
        journal.close(failed())
        lock.release()  # the run fails for good: its run name is free again
        raise AirflowFailException(f"JobSet {ev.namespace}/{ev.name} was deleted outside this task")
    ev = dataclasses.replace(ev, restarts_seen=restarts_now(hook, ev, log))
    cause = stall_cause(ev.kind, ev.restarts_seen, ev.restored_step, extra["history"] or [])  # the ledger's kind
    if cause is not None:  # a stall, or new pods that never came up after the run's had started: an interruption
        ev = dataclasses.replace(ev, kind=STALLED)
    if ev.kind in (UNSTARTABLE, STARTUP_TIMEOUT):
        log.error("%s: deleting JobSet %s/%s", ev.message, ev.namespace, ev.name)
        hook.delete(ev.name, ev.namespace, reason=V.DELETE_ATTEMPT_FAILED)
        journal.close(failed(), cause=ledger.STARTUP_TIMEOUT if ev.kind == STARTUP_TIMEOUT else None)
        lock.release()
        raise AirflowFailException(ev.message)
    if ev.kind == STALLED:
        decision, end = judge(facts, ev, latest, stalled=True)
        log.warning("attempt stalled (%s): deleting JobSet %s -> %s: %s", ev.message, ev.name, decision.kind,
                    decision.reason)
        if decision.kind != SUCCEED:
            hook.delete(ev.name, ev.namespace, reason=V.DELETE_ATTEMPT_FAILED)
        return conclude(end, journal.close(end, cause=cause), facts.last_try, lock, log)
    journal.fault(attempt, latest)
    journal.report(ev.namespace, ev.name, attempt, ev.restarts_seen, latest, ev.message or ev.kind)
    reason = f"lost track of JobSet {ev.namespace}/{ev.name}: {ev.message}"  # ERROR: a retry reattaches
    if facts.last_try:  # no retry will reattach: the try ends, the JobSet may still train
        raise WatchLost(f"{reason}; {KEPT_ON_LAST_TRY}")
    raise JobSetAttemptFailed(reason)


def conclude(end: AttemptEnd, result: dict[str, Any], last: bool, lock: RunLock, log: Any) -> Any:
    """Succeed, fail for good, or retry; the run lock goes with the run (success, final failure, last try).
    An attempt followed in the same try (interrupted after progress) raises NextAttemptInTry, on the last try
    too, and the run lock stays with the run."""
    if end.in_try:
        log.warning("%s", end.line)  # an interruption survived: not an error, and no retry is spent
        raise NextAttemptInTry(end.line)
    if end.kind == SUCCEED or end.kind == FAIL or last:
        lock.release()
    if end.kind == SUCCEED:
        return result
    if end.kind == FAIL:
        raise AirflowFailException(end.reason)
    if not last:
        log.warning("%s", end.line)  # the one line that says what happens (Airflow's own ERROR follows)
    raise JobSetAttemptFailed(end.line) from None


def record_run(call: Callable[[], Any], record: Callable[[str, str], None], last: bool) -> Any:
    """Run the end of an attempt, then record the run's state (an orchestrator fault records nothing new)."""
    try:
        result = call()
    except (OrchestratorFault, Forbidden):
        raise
    except NextAttemptInTry as exc:
        record(RETRYING, str(exc))
        raise
    except JobSetAttemptFailed as exc:
        record(FAILED_RUN if last else RETRYING, str(exc))
        raise
    except AirflowFailException as exc:
        record(FAILED_RUN, str(exc))
        raise
    record(SUCCEEDED_RUN, REACHED_TARGET)
    return result


def restarts_now(hook: Any, ev: JobSetEvent, log: Any) -> int:
    """The attempt's in-cluster restarts for its record: the JobSet's `status.restarts` read now (before any delete;
    a stall can come before the trigger saw the latest restart's watch event), else what the trigger saw."""
    try:
        return max(ev.restarts_seen, hook.status(ev.name, ev.namespace).restarts)
    except ApiUnreachable:
        raise
    except Exception as exc:  # noqa: BLE001 - gone already, or unreadable: the trigger's count stands
        log.info("JobSet %s/%s not readable for its restart count (%s): recording the trigger's %d",
                 ev.namespace, ev.name, exc, ev.restarts_seen)
        return ev.restarts_seen


def fault_on_last_try(exc: Exception, ti: Any, retries: int | None, stopped_by_user: bool, log: Any) -> Exception:
    """An error the provider did not expect: a retry reattaches to the JobSet, so before the last try it stays
    what it is; on the last try it is a fault of the orchestrator (WatchLost: JobSet and run lock kept)."""
    if isinstance(exc, (AirflowException, NextAttemptInTry)) or ti is None or not last_try(ti, retries) \
            or stopped_by_user:
        return exc
    log.error("unexpected error on the last try (%s: %s): %s", type(exc).__name__, exc, KEPT_ON_LAST_TRY)
    return WatchLost(f"{type(exc).__name__}: {exc}; {KEPT_ON_LAST_TRY}")


def keep_for_teardown(ti: Any, fault: OrchestratorFault, log: Any) -> None:
    """Tell the teardown that this try ended for the orchestrator's trouble, so the JobSet is not the run's end."""
    if ti is None:
        return
    try:
        ti.xcom_push(key=JOBSET_KEPT_XCOM_KEY, value={"reason": str(fault)})
    except Exception as exc:  # noqa: BLE001 - the failure itself must still reach Airflow
        log.warning("could not record for the teardown that the JobSet is kept (%s)", exc)


def watch_failed(ti: Any, kwargs: Mapping[str, Any], log: Any) -> str | None:
    """Why this try watches its JobSet again after its trigger failed, or None once it failed MAX_WATCH_FAILURES
    times in this try (then Airflow's trigger failure ends the try). The count is XCom `mtc_watch_failures`."""
    failures = 0
    with contextlib.suppress(Exception):  # unreadable: counted from here
        seen = ti.xcom_pull(task_ids=ti.task_id, key=WATCH_FAILURES_XCOM_KEY)
        if isinstance(seen, Mapping) and seen.get("try_number") == ti.try_number:
            failures = int(seen.get("failures") or 0)
    failures += 1
    if failures > MAX_WATCH_FAILURES:
        log.error("the trigger watching this try's JobSet failed %d times: Airflow's trigger failure ends the try",
                  failures)
        return None
    with contextlib.suppress(Exception):  # the count is a bound, never a reason to end the try
        ti.xcom_push(key=WATCH_FAILURES_XCOM_KEY, value={"try_number": ti.try_number, "failures": failures})
    traceback, error = kwargs.get("traceback"), kwargs.get("error") or "unknown"
    text = "".join(traceback) if isinstance(traceback, list) else str(traceback or "")
    log.warning("the trigger failed (%s)%s", error, f":\n{text.rstrip()}" if text else "")
    return f"the trigger failed ({error}; {failures} of at most {MAX_WATCH_FAILURES} this try)"


def open_journal(ti: Any, lock: RunLock, log: Any, place: RunRecordPlace | None, target: Callable[[], Any],
                 describe: Callable[[], Any]) -> AttemptJournal:
    """This try's attempt journal (adapters.attempt_journal): the one writer of its attempts' records, XComs,
    logs link and run record; the trigger's end of a retry builds the same one from `settings()`."""
    try:
        logs, links = logs_scope(target(), describe()[2].replicated_job_name), True
    except Exception as exc:  # noqa: BLE001 - a link must never change how the attempt ends
        log.warning("the pod logs link of this attempt is left as it is: %s", exc)
        logs, links = None, False
    return AttemptJournal(lock, push=lambda key, value: ti.xcom_push(key=key, value=value), log=log,
                          run_record=place, logs=logs, links=links)


def next_attempt_pending(ev: JobSetEvent, log: Any) -> bool:
    """Whether the event is no attempt's end but the trigger's hand-over of the next attempt, which it closed and
    could not create (triggers.next_in_try): the worker plans and submits it. Raises for an event that ends the try
    without touching the JobSet: a 403 of the triggerer's identity, an API that stopped answering."""
    if ev.kind == FORBIDDEN or (ev.kind == ERROR and "HTTP 403" in ev.message):
        raise forbidden(f"JobSet {ev.namespace}/{ev.name}: {ev.message}")
    if ev.kind == API_UNREACHABLE:
        raise ApiUnreachableFailure(f"{ev.message} (JobSet {ev.namespace}/{ev.name}): {NOT_AN_ATTEMPT}")
    if ev.kind == NEXT_ATTEMPT_PENDING:
        log.warning("%s: this try submits the next attempt (no retry spent)", ev.message)
    return ev.kind == NEXT_ATTEMPT_PENDING


def end_by_kill(connection: Mapping[str, Any], namespace: str, name: str, ids: Mapping[str, Any], lookup: Any,
                error: str, log: Any) -> bool:
    """A SIGTERM of a synchronous try: whether the JobSet was stopped for a user's action Airflow confirms (a mark,
    a deleted DAG run: core.attempt.ownership.kill_verdict); a worker's own SIGTERM or a clear keeps it training
    for the next try. No API outage is waited out (Airflow SIGKILLs 5 s after SIGTERM): the delete is handed off."""
    verdict = kill_verdict(lookup, describe_owner(ids), error)
    if not verdict.delete:
        log.warning("worker stopping: JobSet %s/%s kept: %s; the next try reattaches (to stop the run yourself: "
                    "kubectl delete jobset -n %s %s)", namespace, name, verdict.reason, namespace, name)
        return False
    log.warning("deleting JobSet %s/%s (checkpoints are kept): %s", namespace, name, verdict.reason)
    from mtc_provider.hooks.jobset import MtcJobSetHook

    hook = MtcJobSetHook(connection=connection)  # not the operator's hook: it would wait an API outage out
    try:
        hook.delete(name, namespace, reason=V.DELETE_USER_KILL)
    except (Retryable, ApiUnreachable) as exc:
        from mtc_provider.adapters.kill_delete import handoff

        log.warning("%s", handoff(f"{namespace}/{name}", describe_failure(exc), namespace, name))
        return True
    hook.run_lock(namespace, ids["run_name"],
                  L.run_labels(ids["dag_id"], ids["run_id"], ids["task_id"], ids["run_name"])).release()
    return True


def push_run(ti: Any, lock: RunLock, checkpoint_dir: str, target_step: int, run_name: str) -> None:
    """While the attempt runs: what the run view reads (plugins/run_view.py), since Airflow clears a task's
    XComs when its next try starts: the run's description and every attempt so far, this one still open."""
    ti.xcom_push(key=RUN_XCOM_KEY, value={"checkpoint_dir": checkpoint_dir, "target_step": target_step,
                                          "run_name": run_name})
    ti.xcom_push(key=ATTEMPTS_XCOM_KEY, value=lock.read()[ATTEMPTS])


def write_record(journal: AttemptJournal | None, place: RunRecordPlace | None, state: str, reason: str,
                 progress: Mapping[str, Any] | None, log: Any) -> None:
    """The run's record beside its checkpoints, with every attempt as the journal last read them (none before)."""
    write_run_record(place, state, reason, journal.attempts if journal else [], progress, log,
                     journal.ledger if journal else None)


def ti_run_name(task: Any, checkpoint_dir: str) -> str:
    """The run name of the task's checkpointing (rendered), else the directory's (`<base>/<run_name>/checkpoints`)."""
    checkpointing = task.checkpointing
    name = getattr(checkpointing, "run_name", None) or (checkpointing.get("run_name")
                                                         if isinstance(checkpointing, Mapping) else None)
    return str(name or checkpoint_dir.rstrip("/").rsplit("/", 2)[-2])
