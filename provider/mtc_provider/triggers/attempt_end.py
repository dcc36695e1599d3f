"""Ending a retryable attempt from the triggerer, so no worker slot is taken just to fail the try.

Airflow 3.3.1 routes a trigger's `TaskFailedEvent` through the task's retries (up_for_retry while retries are left:
apache/airflow #69821, backported to 3.3.1 as #71163), so a plain retry without progress is ended here, by the
worker's own rule (core.attempt.attempt_records.end_of_attempt) and through the worker's attempt journal; anything
else resumes the task on a worker. Nothing is deleted here. Why and when: docs/resubmission.md, "Where an end is
decided: once, by the trigger".
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable

from airflow.triggers.base import TriggerEvent

from mtc_provider.core.attempt.status import JobSetState

END_RETRY_IN_TRIGGER = "end_retry_in_trigger"  # the operator's `extra` key: this try may be ended here
MIN_AIRFLOW = "3.3.1"  # TaskFailedEvent honours retries from this version on (apache/airflow #71163)
SYNC_HOOK = "_sync_hook"  # the trigger's attribute holding its one blocking JobSet client (`sync_hook`)


def supported() -> bool:
    """Whether this Airflow sends a trigger's TaskFailedEvent to up_for_retry when retries are left."""
    from packaging.version import Version

    import airflow

    return Version(airflow.__version__).release >= Version(MIN_AIRFLOW).release


async def attempt_verdict(trigger: Any, state: JobSetState) -> dict[str, Any] | None:
    """The decision on an ended attempt, made once, here (core.attempt.resubmission: `decide`, or
    `decide_on_completion` for a one-shot job), with the newest restorable step it was made on; the worker applies
    it without listing or deciding again. None: not decided here (a bare watch, or a listing that failed: the worker
    waits the outage out for listing_timeout and decides)."""
    from mtc_provider.core.attempt.resubmission import decide, decide_on_completion

    extra = trigger.extra
    if extra.get("completion"):
        decision = decide_on_completion(state)
        return {"kind": decision.kind, "reason": decision.reason, "latest_step": None}
    if not trigger.checkpoint_dir or extra.get("target_step") is None:
        return None
    return await verdict_on_listing(trigger, "at the attempt's end", lambda latest: decide(
        state, latest, int(extra["target_step"]), extra.get("history") or [None],
        int(extra.get("crash_loop_attempts") or 1), trigger.restored_step))


async def verdict_on_listing(trigger: Any, when: str, decide: Callable[[int | None], Any]) -> dict[str, Any] | None:
    """The verdict `decide` makes on the newest restorable step, listed now (JobSetTrigger.newest_checkpoints), or
    None when the listing fails: the worker waits a listing outage out (listing_timeout) and decides."""
    try:
        info = (await trigger.newest_checkpoints()).restorable()
    except Exception as exc:  # noqa: BLE001 - the worker decides
        trigger.log.warning("listing %s failed %s (%s): the task resumes on a worker to decide",
                            trigger.checkpoint_dir, when, exc)
        return None
    latest = info.step if info is not None else None
    decision = decide(latest)
    return {"kind": decision.kind, "reason": decision.reason, "latest_step": latest}


async def end_retryable_attempt(trigger: Any, state: JobSetState, restarts: int,
                                verdict: dict[str, Any] | None) -> TriggerEvent | None:
    """A TaskFailedEvent when the `verdict` on this ended attempt is a plain retry and the attempt was closed here;
    None: the task resumes on a worker, which applies the verdict."""
    extra = trigger.extra
    ti = getattr(trigger, "task_instance", None)
    if verdict is None or not extra.get(END_RETRY_IN_TRIGGER) or ti is None or not supported():
        return None
    from mtc_provider.core.attempt.resubmission import RETRY, Decision, restorable_progress, resubmit_in_try
    from mtc_provider.triggers.next_in_try import allowed as next_in_trigger

    decision, latest = Decision(verdict["kind"], verdict["reason"]), verdict["latest_step"]
    if not extra.get("completion") and resubmit_in_try(decision, extra.get("history") or [None],
                                                       restorable_progress(latest, trigger.restored_step)):
        # Interrupted after progress: the same try submits the next attempt, from this trigger when the operator
        # allowed it (triggers.next_in_try), else on a worker; either closes the record the same way.
        if not next_in_trigger(trigger):
            trigger.log.info("%s after progress (newest finalized step %s): the task resumes on a worker to submit "
                             "the next attempt in this try (no Airflow retry spent)", state.describe(), latest)
        return None
    if decision.kind != RETRY:
        return None
    trigger.log.info("%s; newest finalized step %s of %s -> %s: %s", state.describe(), latest,
                     extra.get("target_step"), decision.kind, decision.reason)
    end = end_of(trigger, state, restarts, verdict, ti)
    if end.kind != RETRY:  # over the run's budget: the run fails for good, which the worker ends
        return None
    if await close_in_trigger(trigger, state, end, ti) is None:
        return None
    from airflow.triggers.base import TaskFailedEvent

    trigger.log.info("the triggerer ends this try (TaskFailedEvent): Airflow's retries submit the next attempt")
    return TaskFailedEvent()


def end_of(trigger: Any, state: JobSetState, restarts: int, verdict: dict[str, Any], ti: Any,
           stalled: bool = False) -> Any:
    """The worker's rule for the same end (operators.jobset_end `judge`: core.attempt.attempt_records.end_of_attempt),
    applied to the trigger's verdict; never the last try here (the last try's end is the worker's). `stalled`: the
    verdict is on a stall (deleted, never `failed` in its record)."""
    from mtc_provider.core.attempt.attempt_records import end_of_attempt
    from mtc_provider.core.attempt.budget import BudgetCheck
    from mtc_provider.core.attempt.resubmission import Decision
    from mtc_provider.core.attempt.status import SUCCEEDED

    extra = trigger.extra
    return end_of_attempt(Decision(verdict["kind"], verdict["reason"]), jobset=state.name, namespace=state.namespace,
                          attempt=extra["attempt"],
                          restarts=max(restarts, state.restarts),  # the JobSet's own count is the truth
                          latest=verdict["latest_step"], history=extra.get("history") or [None],
                          phase_succeeded=state.phase == SUCCEEDED, try_number=int(ti.try_number), stalled=stalled,
                          max_tries=getattr(ti, "max_tries", None) or extra.get("max_tries"),
                          target_step=extra.get("target_step"), last_try=False, restored=trigger.restored_step,
                          budget=BudgetCheck.from_dict(extra["budget"]) if extra.get("budget") else None,
                          now=trigger.clock(), steps_per_hour=(trigger.last_progress or {}).get("steps_per_hour"))


async def close_in_trigger(trigger: Any, state: JobSetState, end: Any, ti: Any, once: bool = False,
                           cause: str | None = None) -> Any:
    """Close the ended attempt's record as the worker's end does (the failed pods' log tails, the record through the
    journal, the one line, the run's record, the XComs); the journal, or None when it could not be closed (logged:
    the worker closes it instead). `once`: the end's facts go into the run's ledger only by the write that closes
    the record (two live copies of one trigger may both get here). `cause`: the interruption's kind when the end
    cannot tell it (a stall, a start-up timeout: adapters.attempt_journal `close`)."""
    from mtc_provider.adapters.pod_logs import log_failed_pod_tails

    hook = await asyncio.to_thread(sync_hook, trigger)  # blocking calls, each off the loop
    # why the attempt died, one click away (best effort, as on the worker), beside the record: both off the loop
    tails = asyncio.create_task(asyncio.to_thread(log_failed_pod_tails, trigger.log, hook.api, state.namespace,
                                                  state.name))
    pushed: list[tuple[str, Any]] = []
    try:
        journal = await asyncio.to_thread(journal_of, trigger, ti, pushed)
        await asyncio.to_thread(journal.close, end, cause=cause, once=once)
    except Exception as exc:  # noqa: BLE001 - the worker closes the record instead
        await tails
        trigger.log.warning("could not close the attempt's record from the triggerer (%s): the task resumes on a "
                            "worker to end this try", exc)
        return None
    await tails
    trigger.log.warning("%s", end.line)  # the one line that says what happens, as the worker's: not an error
    # The run's record beside the checkpoints (a blocking write, best effort) and the XComs (round trips through
    # the triggerer's comms) do not depend on each other: both run at once, and both are done before the try ends.
    await asyncio.gather(asyncio.to_thread(journal.record_run, end.run_state, end.line, trigger.last_progress),
                         push_xcoms(trigger, ti, pushed))
    return journal


def sync_hook(trigger: Any, outage_s: float = 0.0) -> Any:
    """The trigger's one blocking JobSet client (MtcJobSetHook), built at its first use and shared by every step and
    thread after it (adapters.kubernetes: one client, token and connection); call it off the loop. `outage_s`: this
    step waits an unreachable API out at most that long (bounded by api_outage_timeout), over the same client."""
    # Steps in two threads at once (the pod tails beside the record) build it once; a lock per trigger, so the
    # triggerer's other triggers never wait on this one's build (dict.setdefault is atomic).
    with vars(trigger).setdefault("_sync_hook_lock", threading.Lock()):
        hook = vars(trigger).get(SYNC_HOOK)
        if hook is None:
            from mtc_provider.hooks.jobset import MtcJobSetHook

            watch = getattr(trigger, "watch", None)
            hook = MtcJobSetHook(connection=trigger.connection, request_timeout=watch and watch.pacing.request_timeout)
            hook.api  # noqa: B018 - built under the lock: its client cache is the one the threads share
            setattr(trigger, SYNC_HOOK, hook)
    bound = min(float(getattr(trigger, "api_outage_timeout", 0) or 0), outage_s)
    return hook.waiting_out(bound) if bound > 0 else hook


def run_lock(trigger: Any, ti: Any = None) -> Any:
    """The run's lock as the try that deferred took it (adapters.run_lock: the run labels of `extra["owner"]`, else
    of `ti`, by default the trigger's task instance), through the trigger's sync hook: blocking. None without those
    ids or a run name."""
    owner, ti = trigger.extra.get("owner") or {}, ti or getattr(trigger, "task_instance", None)
    ids = [owner.get(key) or getattr(ti, key, None) for key in ("dag_id", "run_id", "task_id")]
    run_name = trigger.extra.get("run_name")
    if not all(ids) or not run_name:
        return None
    from mtc_provider.core.basics import labels as L

    return sync_hook(trigger).run_lock(trigger.extra.get("namespace") or trigger.namespace, run_name,
                                       L.run_labels(*ids, run_name))


def journal_of(trigger: Any, ti: Any, pushed: list[tuple[str, Any]]) -> Any:
    """The worker's attempt journal (adapters.attempt_journal), built from the settings the operator handed over;
    its XComs are collected in `pushed` (the trigger sends them through the triggerer's comms)."""
    from mtc_provider.adapters.attempt_journal import AttemptJournal

    extra = trigger.extra
    return AttemptJournal.from_settings(run_lock(trigger),
                                        extra.get("journal") or _settings_of_older_operator(trigger, ti),
                                        log=trigger.log, push=lambda key, value: pushed.append((key, value)))


def _settings_of_older_operator(trigger: Any, ti: Any) -> dict[str, Any]:
    """A trigger deferred by a provider version before the journal (an upgrade while the task waits): the run's
    record from the trigger's own fields, as that version wrote it; the logs link is left as it is."""
    from mtc_provider.core.attempt.ownership import task_owner

    extra = trigger.extra
    return {"run_record": {"checkpoint_dir": trigger.checkpoint_dir, "impersonation_chain": trigger.impersonation_chain,
                           "gcp_conn_id": trigger.gcp_conn_id or "google_cloud_default",
                           "run_name": extra["run_name"], "namespace": extra.get("namespace") or trigger.namespace,
                           "target_step": extra.get("target_step"), "owner": task_owner(ti)},
            "links": False}


async def push_xcoms(trigger: Any, ti: Any, pushed: list[tuple[str, Any]]) -> None:
    """The XComs the worker's end would push, through the triggerer's comms (adapters.live_xcom); best effort."""
    from mtc_provider.adapters.live_xcom import apush_xcom
    from mtc_provider.core.attempt.ownership import task_owner

    owner = task_owner(ti)
    for key, value in pushed:
        try:
            await apush_xcom(owner, key, value)
        except Exception as exc:  # noqa: BLE001 - the records in the run lock and beside the checkpoints stand
            trigger.log.warning("could not push the %s XCom from the triggerer (%s)", key, exc)
            return
