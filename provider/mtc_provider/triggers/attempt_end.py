"""Ending a retryable attempt from the triggerer, so no worker slot is taken just to fail the try.

When the JobSet ends and the decision is "retry" (core.resubmission.decide, the same call the operator's
`execute_complete` makes), resuming the task on a worker only to raise JobSetAttemptFailed costs a worker slot,
a task process, the DAG file's parse and the provider's imports (seconds on every resubmission: docs/benchmarks.md,
"Where the seconds go"). Airflow 3.3.1 routes a trigger's `TaskFailedEvent` through the task's retries (up_for_retry
while retries are left: apache/airflow #69821, backported to 3.3.1 as #71163), so the trigger ends the try itself,
after the same bookkeeping the worker would do: the failed pods' log tails (in this try's log), and the attempt's
record closed in the run lock (end, outcome, restarts, newest step).

Only the plain retry without progress is ended here: an attempt interrupted after progress is followed in the
same try (core.resubmission.resubmit_in_try), which needs the worker to submit it, so the worker ends it. Success,
a final failure (crash loop, non-retryable), the last try, a listing that fails (the worker waits it out for listing_timeout), a trigger without a task instance (`dag.test`, the
synchronous path), or any error in the bookkeeping: the worker resumes as before. Nothing is deleted here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.triggers.base import TriggerEvent

from mtc_provider.core.status import JobSetState

END_RETRY_IN_TRIGGER = "end_retry_in_trigger"  # the operator's `extra` key: this try may be ended here
MIN_AIRFLOW = "3.3.1"  # TaskFailedEvent honours retries from this version on (apache/airflow #71163)


def supported() -> bool:
    """Whether this Airflow sends a trigger's TaskFailedEvent to up_for_retry when retries are left."""
    from packaging.version import Version

    import airflow

    return Version(airflow.__version__).release >= Version(MIN_AIRFLOW).release


async def end_retryable_attempt(trigger: Any, state: JobSetState, restarts: int) -> TriggerEvent | None:
    """A TaskFailedEvent when this ended attempt is a plain retry and was closed here; None: resume the worker."""
    extra = trigger.extra
    ti = getattr(trigger, "task_instance", None)
    if not extra.get(END_RETRY_IN_TRIGGER) or ti is None or not supported():
        return None
    from mtc_provider.core.resubmission import RETRY, decide, decide_on_completion, resubmit_in_try

    latest = None
    if extra.get("completion"):
        decision = decide_on_completion(state)
    else:
        if not trigger.checkpoint_dir:
            return None
        try:
            info = await trigger._latest_checkpoint(after=None)
        except Exception as exc:  # noqa: BLE001 - the worker waits a listing outage out (listing_timeout)
            trigger.log.warning("listing %s failed at the attempt's end (%s): the task resumes on a worker to "
                                "decide", trigger.checkpoint_dir, exc)
            return None
        latest = info.step if info is not None else None
        decision = decide(state, latest, int(extra["target_step"]), extra.get("history") or [None],
                          int(extra.get("crash_loop_attempts") or 1))
        if resubmit_in_try(decision, extra.get("history") or [None], latest):
            # Interrupted after progress: the same try submits the next attempt, which takes a worker (the submit
            # is the worker's); the worker closes the record, so it is the same whoever would have ended it.
            trigger.log.info("%s after progress (newest finalized step %s): the task resumes on a worker to submit "
                             "the next attempt in this try (no Airflow retry spent)", state.describe(), latest)
            return None
    if decision.kind != RETRY:
        return None
    trigger.log.info("%s; newest finalized step %s of %s -> %s: %s", state.describe(), latest,
                     extra.get("target_step"), decision.kind, decision.reason)
    from mtc_provider import targets
    from mtc_provider.adapters.pod_logs import log_failed_pod_tails
    from mtc_provider.core.resubmission import resubmission_line

    restarts = max(restarts, state.restarts)  # the JobSet's own count is the truth (a restart the watch missed)
    api = targets.jobset_api(trigger.connection, outage_timeout=0.0)
    # why the attempt died, one click away (best effort, as on the worker), beside the record: both off the loop
    tails = asyncio.create_task(asyncio.to_thread(log_failed_pod_tails, trigger.log, api, state.namespace, state.name))
    line = resubmission_line(decision.reason, latest, int(ti.try_number), getattr(ti, "max_tries", None),
                             extra.get("target_step"))
    try:
        lock = await asyncio.to_thread(_close_attempt, trigger, api, ti, state, restarts, latest, line)
    except Exception as exc:  # noqa: BLE001 - the worker closes the record instead
        await tails
        trigger.log.warning("could not close the attempt's record from the triggerer (%s): the task resumes on a "
                            "worker to end this try", exc)
        return None
    await tails
    await asyncio.to_thread(_record_retrying, trigger, ti, lock, line)
    from airflow.triggers.base import TaskFailedEvent

    # The one line that says what happens, as the worker's (core.resubmission.resubmission_line): not an error.
    trigger.log.warning("%s. The triggerer ends this try (TaskFailedEvent); Airflow's retries submit the next "
                        "attempt", line)
    return TaskFailedEvent()


def _close_attempt(trigger: Any, api: Any, ti: Any, state: JobSetState, restarts: int, latest: int | None,
                   reason: str) -> None:
    """The attempt's record closed in the run lock as the worker closes it (RunLock.close_attempt), blocking (off
    the loop)."""
    from mtc_provider.adapters.run_lock import RunLock, lock_api
    from mtc_provider.core.outcomes import DISRUPTED
    from mtc_provider.core import labels as L

    extra = trigger.extra
    run_name, namespace = extra["run_name"], extra.get("namespace") or trigger.namespace
    lock = RunLock(lock_api(trigger.connection, api), namespace, run_name,
                   L.run_labels(ti.dag_id, ti.run_id, ti.task_id, run_name))
    from mtc_provider.core.interruptions import interruption_of
    from mtc_provider.core.status import SUCCEEDED

    # as the worker closes it (operators.jobset `_finish`): here only retries without progress, never in-try
    lock.close_attempt(state.name, DISRUPTED, restarts, latest, reason, interruption_of(state.phase == SUCCEEDED),
                       False)
    return lock


def _record_retrying(trigger: Any, ti: Any, lock: Any, reason: str) -> None:
    """The run's record beside its checkpoints says "retrying", as the worker's end of a retry writes it
    (operators.jobset `_write_record`; read by `mtc status`/`mtc list`). Best effort: it never changes the end."""
    from mtc_provider.adapters.run_lock import ATTEMPTS
    from mtc_provider.adapters.run_records import record_run
    from mtc_provider.core.ownership import task_owner
    from mtc_provider.core.run_summary import RETRYING

    extra, checkpoint_dir = trigger.extra, trigger.checkpoint_dir
    try:
        record_run(checkpoint_dir, trigger.gcp_conn_id or "google_cloud_default", trigger.impersonation_chain,
                   run_name=extra["run_name"], namespace=extra.get("namespace") or trigger.namespace,
                   target_step=extra.get("target_step"), state=RETRYING, attempts=lock.read()[ATTEMPTS],
                   owner=task_owner(ti), reason=reason)
    except Exception as exc:  # noqa: BLE001 - the record is for people reading the run later
        trigger.log.warning("could not write the run's attempt record beside %s: %s", checkpoint_dir, exc)
