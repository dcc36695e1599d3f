"""The worker's end of an attempt, for the launch operator (`MtcJobSetOperator` mixes it in).

When the trigger hands an attempt's end back (`execute_complete`), or a try finds its own attempt ended, the end
is decided by the pure rules (core.attempt.resubmission; core.attempt.attempt_records.end_of_attempt: the triggerer's end of a
plain retry uses the same one) and written through the attempt journal (adapters.attempt_journal). Then the try
succeeds, fails for good, spends an Airflow retry, or goes on with the next attempt (NextAttemptInTry).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Callable, Mapping, Sequence

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from mtc_provider.adapters.attempt_journal import (ATTEMPTS_XCOM_KEY, PROGRESS_XCOM_KEY, RUN_XCOM_KEY,  # noqa: F401
                                                   AttemptJournal, RunRecordPlace, logs_scope, write_run_record)
from mtc_provider.adapters.kubernetes import Forbidden
from mtc_provider.adapters.pod_logs import log_failed_pod_tails
from mtc_provider.adapters.protocols import CheckpointStore
from mtc_provider.adapters.retry import ApiUnreachable, PermissionDenied
from mtc_provider.adapters.run_lock import ATTEMPTS, RunLock
from mtc_provider.core.basics import vocabulary as V
from mtc_provider.core.attempt.attempt_records import REACHED_TARGET, AttemptEnd, end_of_attempt
from mtc_provider.core.attempt.jobset_events import (API_UNREACHABLE, DELETED, ENDED, ERROR, FORBIDDEN, LISTING_FAILED,
                                                     STALLED, STARTUP_TIMEOUT, UNSTARTABLE, JobSetEvent)
from mtc_provider.core.attempt.ownership import foreign_event
from mtc_provider.core.attempt.ownership import task_owner as _owner
from mtc_provider.core.attempt.resubmission import FAIL, SUCCEED, decide, decide_on_completion, decide_stalled
from mtc_provider.core.attempt.run_summary import FAILED as FAILED_RUN, RETRYING, SUCCEEDED as SUCCEEDED_RUN
from mtc_provider.core.attempt.status import SUCCEEDED, JobSetState
from mtc_provider.operators.jobset_failures import (NOT_AN_ATTEMPT, ApiUnreachableFailure, JobSetAttemptFailed,
                                                    JobSetForbidden, NextAttemptInTry, OrchestratorFault, WatchLost,
                                                    forbidden, storage_forbidden)

KEPT_ON_LAST_TRY = ("no retry is left to reattach, so this try ends; the JobSet (which may still be training) and "
                    "the run lock are kept, and the teardown keeps them: clear the task once the cause is fixed to "
                    "reattach, or stop the run with mtc delete")
WATCH_FAILURES_XCOM_KEY = "mtc_watch_failures"  # failed triggers of this try (resume_execution's bound)
MAX_WATCH_FAILURES = 3


def _has_started(ev: JobSetEvent, history: Sequence[int | None] | None) -> bool:
    """Whether the run's pods have started before: this attempt restarted in the cluster or restored a step, or the
    run has a restorable step. A start-up timeout is then an interruption; before that, a failure to start."""
    return ev.restarts_seen > 0 or ev.restored_step is not None or any(s is not None for s in history or [])


class AttemptEndMixin:
    """`execute_complete` and what follows an attempt's end in the worker (needs the launch operator's inputs)."""

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        ti = context.get("ti") if isinstance(context, Mapping) else None
        foreign = foreign_event((event.get("extra") or {}).get("owner"), _owner(ti)) if ti is not None else ""
        if foreign:  # not this attempt's end, whatever it says: this try's own JobSet is watched again
            return self._watch_again(context, f"{foreign}; its {event.get('kind')} of JobSet "
                                              f"{event.get('namespace')}/{event.get('name')} is not this try's")
        try:
            try:
                return self._complete(context, event)
            except NextAttemptInTry:
                if getattr(self, "_in_execute", False):  # the synchronous path: execute's loop submits it
                    raise
                return self.execute(context)  # deferred: this try submits the next attempt and defers again
            except JobSetForbidden:
                raise
            except Forbidden as exc:  # a 403 while closing the attempt: fail for good, delete nothing more
                raise forbidden(str(exc)) from exc
            except PermissionDenied as exc:  # the storage's 403 while reading the attempt's end
                raise storage_forbidden(exc, str(event.get("checkpoint_dir") or self._describe()[1]
                                                 .checkpoint_directory), *self._google()) from exc
            except Exception as exc:
                fault = self._fault_on_last_try(ti, exc)
                if fault is exc:
                    raise
                raise fault from exc
        except OrchestratorFault as fault:
            self._keep_for_teardown(context, fault)
            raise

    def _fault_on_last_try(self, ti: Any, exc: Exception) -> Exception:
        """An error the provider did not expect: a retry reattaches to the JobSet, so before the last try it stays
        what it is; on the last try it is a fault of the orchestrator (WatchLost: JobSet and run lock kept)."""
        if isinstance(exc, (AirflowException, NextAttemptInTry)) or ti is None or not self._last_try(ti) \
                or getattr(self, "_stopped_by_user", False):
            return exc
        self.log.error("unexpected error on the last try (%s: %s): %s", type(exc).__name__, exc, KEPT_ON_LAST_TRY)
        return WatchLost(f"{type(exc).__name__}: {exc}; {KEPT_ON_LAST_TRY}")

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """A trigger that failed (Airflow's `__fail__`: it raised, or exited without an event) lost the watch, not
        the attempt: the JobSet does not depend on its watcher. The try watches its JobSet again (a live one is
        reattached to, as a retry would, without spending the retry), at most MAX_WATCH_FAILURES times per try;
        then, and on a trigger timeout, Airflow's own handling (TaskDeferralError). The failure may not even be this
        try's: Airflow fails whatever is deferred on the failed trigger's id (core.attempt.ownership.foreign_event)."""
        from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

        kwargs = next_kwargs or {}
        ti = context.get("ti") if isinstance(context, Mapping) else None
        if next_method != TRIGGER_FAIL_REPR or kwargs.get("error") == TriggerFailureReason.TRIGGER_TIMEOUT \
                or ti is None:
            return super().resume_execution(next_method, next_kwargs, context)
        failures = self._watch_failures(ti) + 1
        if failures > MAX_WATCH_FAILURES:
            self.log.error("the trigger watching this try's JobSet failed %d times: Airflow's trigger failure "
                           "ends the try", failures)
            return super().resume_execution(next_method, next_kwargs, context)
        with contextlib.suppress(Exception):  # the count is a bound, never a reason to end the try
            ti.xcom_push(key=WATCH_FAILURES_XCOM_KEY, value={"try_number": ti.try_number, "failures": failures})
        traceback = kwargs.get("traceback")
        text = "".join(traceback) if isinstance(traceback, list) else str(traceback or "")
        self.log.warning("the trigger failed (%s)%s", kwargs.get("error") or "unknown",
                         f":\n{text.rstrip()}" if text else "")
        return self._watch_again(context, f"the trigger failed ({kwargs.get('error') or 'unknown'}; "
                                          f"{failures} of at most {MAX_WATCH_FAILURES} this try)")

    def _watch_failures(self, ti: Any) -> int:
        try:
            seen = ti.xcom_pull(task_ids=ti.task_id, key=WATCH_FAILURES_XCOM_KEY)
        except Exception:  # noqa: BLE001 - unreadable: counted from here
            return 0
        if isinstance(seen, Mapping) and seen.get("try_number") == ti.try_number:
            return int(seen.get("failures") or 0)
        return 0

    def _watch_again(self, context: Any, why: str) -> Any:
        """Not this attempt's end: the try runs its launch again, which reattaches to its live JobSet (or takes
        the result of an ended one) and defers with a new trigger; nothing is deleted, no retry is spent."""
        self.log.warning("%s: not this attempt's end; this try watches its own JobSet again (no retry spent)", why)
        return self.execute(context)

    def _complete(self, context: Any, event: dict[str, Any]) -> Any:
        ev = JobSetEvent.from_payload(event)
        if ev.kind == FORBIDDEN or (ev.kind == ERROR and "HTTP 403" in ev.message):
            # The triggerer's identity may not watch the JobSet or read its pods: the JobSet is left as it is.
            raise forbidden(f"JobSet {ev.namespace}/{ev.name}: {ev.message}")
        if ev.kind == API_UNREACHABLE:  # before any request: the API is not answering
            self._current = None
            raise ApiUnreachableFailure(f"{ev.message} (JobSet {ev.namespace}/{ev.name}): {NOT_AN_ATTEMPT}")
        extra = ev.extra

        def complete() -> Any:
            try:
                return self._execute_complete(context, ev)
            except ApiUnreachable as exc:
                raise self._unreachable(exc) from exc

        return self._recorded(context, ev.namespace, extra.get("checkpoint_dir"), extra.get("target_step"),
                              ev.progress, complete)

    def _execute_complete(self, context: Any, ev: JobSetEvent) -> Any:
        extra = ev.extra
        if ev.progress:  # the trigger's latest progress figures, for dashboards and downstream tasks
            context["ti"].xcom_push(key=PROGRESS_XCOM_KEY, value=ev.progress)
        connection = self.hook.connection
        store = self._store(extra["checkpoint_dir"])
        lock = self._lock_for(context, extra)
        self._current = None
        if ev.state is not None and ev.state.restarts > ev.restarts_seen:  # the JobSet's own count is the truth
            ev = dataclasses.replace(ev, restarts_seen=ev.state.restarts)
        if ev.kind == ENDED and ev.state is not None:
            return self._finish(context, connection, lock, ev.state, extra["attempt"], extra["history"], store,
                                extra["checkpoint_dir"], extra["target_step"], ev.restarts_seen, ev.restored_step)
        latest = self._latest_or_none(store, extra["checkpoint_dir"])
        journal = self._journal_for(context, lock, ev.namespace, extra.get("checkpoint_dir"), extra.get("target_step"))
        if ev.kind == LISTING_FAILED:  # training goes on: a retry reattaches; a 403 needs the user
            journal.report(ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest, ev.message)
            if " 403" in ev.message or "HTTP 403" in ev.message:  # Airflow's identity: kept, like the cluster's 403
                raise storage_forbidden(PermissionDenied(ev.message), extra["checkpoint_dir"], *self._google())
            raise JobSetAttemptFailed(ev.message)
        if ev.kind == DELETED:
            journal.close(AttemptEnd.failed(jobset=ev.name, namespace=ev.namespace, attempt=extra["attempt"],
                                            restarts=ev.restarts_seen, latest=latest, reason=ev.message))
            lock.release()  # the run fails for good: its run name is free again
            raise AirflowFailException(f"JobSet {ev.namespace}/{ev.name} was deleted outside this task")
        ev = dataclasses.replace(ev, restarts_seen=self._restarts_now(ev))
        if ev.kind == STARTUP_TIMEOUT and _has_started(ev, extra["history"]):
            # New pods that never came up after the run had started (a replacement node whose ramdisk never mounts):
            # an interruption, as a stall is; a new attempt gets new pods.
            ev = dataclasses.replace(ev, kind=STALLED)
        if ev.kind in (UNSTARTABLE, STARTUP_TIMEOUT):
            self.log.error("%s: deleting JobSet %s/%s", ev.message, ev.namespace, ev.name)
            self.hook.delete(ev.name, ev.namespace, reason=V.DELETE_ATTEMPT_FAILED)
            journal.close(AttemptEnd.failed(jobset=ev.name, namespace=ev.namespace, attempt=extra["attempt"],
                                            restarts=ev.restarts_seen, latest=latest, reason=ev.message))
            lock.release()
            raise AirflowFailException(ev.message)
        if ev.kind == STALLED:
            decision = decide_stalled(latest, extra["target_step"], extra["history"] or [None],
                                      self._opts.crash_loop_attempts, why=ev.message, restored_step=ev.restored_step)
            self.log.warning("attempt stalled (%s): deleting JobSet %s -> %s: %s", ev.message, ev.name,
                             decision.kind, decision.reason)
            if decision.kind != SUCCEED:
                self.hook.delete(ev.name, ev.namespace, reason=V.DELETE_ATTEMPT_FAILED)
            end = self._end(context["ti"], decision, ev.state, ev.name, ev.namespace, extra["attempt"],
                            ev.restarts_seen, latest, extra["history"], extra["target_step"], stalled=True,
                            restored=ev.restored_step)
            return self._conclude(context, lock, end, journal.close(end))
        journal.report(ev.namespace, ev.name, extra["attempt"], ev.restarts_seen, latest, ev.message or ev.kind)
        reason = f"lost track of JobSet {ev.namespace}/{ev.name}: {ev.message}"  # ERROR: a retry reattaches
        if self._last_try(context["ti"]):  # no retry will reattach: the try ends, the JobSet may still train
            raise WatchLost(f"{reason}; {KEPT_ON_LAST_TRY}")
        raise JobSetAttemptFailed(reason)

    def _restarts_now(self, ev: JobSetEvent) -> int:
        """The attempt's in-cluster restarts for its record: the JobSet's `status.restarts` read now (before any
        delete), else what the trigger saw. A stall or start-up verdict can come before the trigger has seen the
        watch event of the latest restart; the record (and the demo summary's count) must not miss it."""
        try:
            return max(ev.restarts_seen, self.hook.status(ev.name, ev.namespace).restarts)
        except ApiUnreachable:
            raise
        except Exception as exc:  # noqa: BLE001 - gone already, or unreadable: the trigger's count stands
            self.log.info("JobSet %s/%s not readable for its restart count (%s): recording the trigger's %d",
                          ev.namespace, ev.name, exc, ev.restarts_seen)
            return ev.restarts_seen

    def _finish(self, context, connection, lock: RunLock, state: JobSetState, attempt: int,
                history: list[int | None], store: CheckpointStore | None, checkpoint_dir: str, target_step: int,
                restarts: int, restored: int | None = None) -> Any:
        latest = self._latest(store, checkpoint_dir)
        if self._completion:
            decision = decide_on_completion(state)
        else:
            decision = decide(state, latest, target_step, history or [None], self._opts.crash_loop_attempts,
                              restored)
        self.log.info("%s; newest finalized step %s of %s -> %s: %s", state.describe(), latest, target_step,
                      decision.kind, decision.reason)
        if decision.kind != SUCCEED:  # why the attempt died, one click away: bounded tails of the failed pods
            log_failed_pod_tails(self.log, self.hook.api, state.namespace, state.name)
        # the one rule and the one journal of the triggerer's end too (triggers.attempt_end)
        end = self._end(context["ti"], decision, state, state.name, state.namespace, attempt, restarts, latest,
                        history, target_step, restored=restored)
        journal = self._journal_for(context, lock, state.namespace, checkpoint_dir, target_step)
        return self._conclude(context, lock, end, journal.close(end))

    def _end(self, ti, decision, state: JobSetState | None, name: str, namespace: str, attempt: int, restarts: int,
             latest: int | None, history: list[int | None] | None, target_step: int | None,
             stalled: bool = False, restored: int | None = None) -> AttemptEnd:
        return end_of_attempt(decision, jobset=name, namespace=namespace, attempt=attempt, restarts=restarts,
                              latest=latest, history=history or [None],
                              phase_succeeded=state is not None and state.phase == SUCCEEDED,
                              try_number=ti.try_number, max_tries=self._max_tries(ti), target_step=target_step,
                              last_try=self._last_try(ti), completion=self._completion, stalled=stalled,
                              restored=restored)

    def _conclude(self, context, lock: RunLock, end: AttemptEnd, result: dict[str, Any]) -> Any:
        """Succeed, fail for good, or retry; the run lock goes with the run (success, final failure, last try).
        An attempt followed in the same try (interrupted after progress) raises NextAttemptInTry, on the last try
        too, and the run lock stays with the run."""
        if end.in_try:
            self.log.warning("%s", end.line)  # an interruption survived: not an error, and no retry is spent
            raise NextAttemptInTry(end.line)
        last = self._last_try(context["ti"])
        if end.kind == SUCCEED or end.kind == FAIL or last:
            lock.release()
        if end.kind == SUCCEED:
            return result
        if end.kind == FAIL:
            raise AirflowFailException(end.reason)
        if not last:
            self.log.warning("%s", end.line)  # the one line that says what happens (Airflow's own ERROR follows)
        raise JobSetAttemptFailed(end.line) from None

    def _max_tries(self, ti) -> int | None:
        return getattr(ti, "max_tries", None) or self.retries

    def _last_try(self, ti) -> bool:
        return ti.try_number > (getattr(ti, "max_tries", None) or self.retries or 0)

    def _push_run(self, context, lock: RunLock, checkpoint_dir: str, target_step: int, run_name: str) -> None:
        """While the attempt runs: what the run view reads (plugins/run_view.py), since Airflow clears a task's
        XComs when its next try starts: the run's description and every attempt so far, this one still open."""
        context["ti"].xcom_push(key=RUN_XCOM_KEY, value={"checkpoint_dir": checkpoint_dir, "target_step": target_step,
                                                         "run_name": run_name})
        context["ti"].xcom_push(key=ATTEMPTS_XCOM_KEY, value=lock.read()[ATTEMPTS])

    def _journal_for(self, context, lock: RunLock, namespace: str, checkpoint_dir: str | None,
                     target_step: int | None) -> AttemptJournal:
        """This try's attempt journal (adapters.attempt_journal): the one writer of its attempts' records, XComs,
        logs link and run record; the trigger's end of a retry builds the same one from `settings()`."""
        place = self._run_record_place(context["ti"], namespace, checkpoint_dir, target_step)
        try:
            logs, links = logs_scope(self._target(), self._describe()[2].replicated_job_name), True
        except Exception as exc:  # noqa: BLE001 - a link must never change how the attempt ends
            self.log.warning("the pod logs link of this attempt is left as it is: %s", exc)
            logs, links = None, False
        self._journal = AttemptJournal(lock, push=lambda key, value: context["ti"].xcom_push(key=key, value=value),
                                       log=self.log, run_record=place, logs=logs, links=links)
        return self._journal

    # --- the run's record beside its checkpoints (adapters.run_records; read by mtc status / mtc list) -------
    def _recorded(self, context, namespace: str, checkpoint_dir: str | None, target_step: int | None,
                  progress: Mapping[str, Any] | None, call: Callable[[], Any]) -> Any:
        """Run the end of an attempt, then record the run's state: succeeded, retrying, or failed. An
        orchestrator fault records nothing new (the JobSet may still be training)."""
        ti = context["ti"]
        self._journal = None

        def record(state: str, reason: str) -> None:
            seen = self._journal.attempts if self._journal is not None else []
            self._write_record(ti, namespace, checkpoint_dir, target_step, state, seen, reason, progress)

        try:
            result = call()
        except (OrchestratorFault, Forbidden):
            raise
        except NextAttemptInTry as exc:
            record(RETRYING, str(exc))
            raise
        except JobSetAttemptFailed as exc:
            record(FAILED_RUN if self._last_try(ti) else RETRYING, str(exc))
            raise
        except AirflowFailException as exc:
            record(FAILED_RUN, str(exc))
            raise
        record(SUCCEEDED_RUN, REACHED_TARGET)
        return result

    def _run_record_place(self, ti, namespace: str, checkpoint_dir: str | None,
                          target_step: int | None) -> RunRecordPlace | None:
        """Where the run's record goes. A one-shot job (wait_for="completion", e.g. an evaluation reading a training
        run's checkpoints) writes none: the record beside those checkpoints is the training run's."""
        if not checkpoint_dir or self._completion:
            return None
        gcp_conn_id, impersonation_chain = self._google()
        return RunRecordPlace(checkpoint_dir, gcp_conn_id, impersonation_chain, ti_run_name(self, checkpoint_dir),
                              namespace, target_step, _owner(ti))

    def _write_record(self, ti, namespace: str, checkpoint_dir: str | None, target_step: int | None, state: str,
                      attempts: Sequence[Mapping[str, Any]], reason: str,
                      progress: Mapping[str, Any] | None = None) -> None:
        write_run_record(self._run_record_place(ti, namespace, checkpoint_dir, target_step), state, reason,
                         list(attempts), progress, self.log)


def ti_run_name(task: Any, checkpoint_dir: str) -> str:
    """The run name of the task's checkpointing (rendered), else the directory's (`<base>/<run_name>/checkpoints`)."""
    checkpointing = task.checkpointing
    name = getattr(checkpointing, "run_name", None) or (checkpointing.get("run_name")
                                                         if isinstance(checkpointing, Mapping) else None)
    return str(name or checkpoint_dir.rstrip("/").rsplit("/", 2)[-2])
