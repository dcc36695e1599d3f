"""A JobSet trigger cancelled "by user action": its JobSet is deleted only when Airflow confirms the user's kill.

Airflow 3.3 also cancels a trigger that moved to another triggerer (a lapsed heartbeat) with the user's message
(TriggerRunnerSupervisor.update_triggers -> TriggerRunner.cancel_triggers -> run_trigger, apache/airflow PR #73454),
so the task instance's state is asked now (core.attempt.ownership.kill_verdict): still deferred, running or cleared
keeps the JobSet (the next try reattaches); marked or a deleted DAG run deletes it, with the reason, and a run over
for good frees its run name. A delete stops every live attempt of this try found by its labels (run, task and try
exactly), not only the one followed: the trigger may have created the next attempt and not yet followed it
(triggers.next_in_try). A listing that fails or hangs is bounded: the known attempt is deleted all the same, the
run lock kept, and the kill says what it did not check.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from mtc_provider.core.basics.vocabulary import DELETE_USER_KILL


async def on_kill(trigger: Any) -> None:
    from mtc_provider.adapters.kill_delete import adelete_within, handoff, trigger_budget
    from mtc_provider.adapters.task_state import atry_lookup
    from mtc_provider.core.attempt.ownership import describe_owner, kill_verdict, task_owner

    namespace, name, log = trigger.namespace, trigger.name, trigger.log
    where, started = f"{namespace}/{name}", time.monotonic()
    if not trigger.delete_on_kill:
        log.info("trigger cancelled: JobSet %s kept (delete_on_kill is off)", where)
        return
    ti = trigger.task_instance
    if ti is None:
        lookup, error, who = None, "the triggerer gave this trigger no task instance", "this task"
    else:
        who = describe_owner(task_owner(ti))
        lookup, error = await atry_lookup(task_owner(ti))
    verdict = kill_verdict(lookup, who, error)
    if not verdict.delete:
        log.warning("trigger cancelled: JobSet %s kept: %s. To stop the run yourself: kubectl delete jobset -n %s %s",
                    where, verdict.reason, namespace, name)
        return
    hook = await asyncio.to_thread(trigger.build_hook)
    if lookup is not None and lookup.state_name == "success" and await hook.ended(name, namespace):
        # `success` is a user's mark or the try's own success (its trigger fired on another triggerer, this stale
        # copy is cancelled afterwards): an ended JobSet has nothing to stop either way, and the run's teardown
        # deletes it.
        log.info("trigger cancelled: JobSet %s kept: it has ended and %s succeeded; nothing to stop (the run's "
                 "teardown deletes it)", where, who)
        return
    others, unchecked = await _later_attempts(trigger, ti, trigger_budget(time.monotonic() - started) / 3)
    asked = f"a confirmed user action: on_kill of try {getattr(ti, 'try_number', '?')}"
    failed = ""
    for each in [name, *others]:
        log.warning("deleting JobSet %s/%s (checkpoints are kept): asked by %s; %s", namespace, each, asked,
                    verdict.reason)
        why = await adelete_within(lambda each=each: hook.api.delete(namespace, each, reason=DELETE_USER_KILL),
                                   trigger_budget(time.monotonic() - started))
        if why:  # the lock stays too: the teardown releases it with the JobSet
            failed = why
            log.warning("%s", handoff(f"{namespace}/{each}", why, namespace, each))
    if unchecked:
        log.warning("%s", unchecked)
    elif not failed and verdict.run_over and ti is not None and trigger.extra.get("run_name"):
        await asyncio.to_thread(_release_lock, trigger, ti)


async def _later_attempts(trigger: Any, ti: Any, budget: float) -> tuple[list[str], str]:
    """The other live attempts of this try (one the trigger created but did not follow yet when the kill came), by
    their labels; and, when they could not be listed, the line that says what was not checked ("" when listed)."""
    from mtc_provider.adapters.kill_delete import live_attempts_of_try
    from mtc_provider.triggers.attempt_end import sync_hook
    from mtc_provider.core.basics import labels as L

    run_name, namespace = trigger.extra.get("run_name"), trigger.namespace
    if ti is None or not run_name:
        return [], ""  # no task to find attempts of (no try of this task could have created another)
    labels = L.run_labels(ti.dag_id, ti.run_id, ti.task_id, run_name)
    found, error = await live_attempts_of_try(lambda: sync_hook(trigger), namespace, labels, ti.try_number, budget)
    if error:
        selector = L.selector({**labels, L.TRY_NUMBER: str(ti.try_number)})
        return [], (f"could not list the other attempts of try {ti.try_number} ({error}): only JobSet "
                    f"{namespace}/{trigger.name} was deleted; an attempt of this try created since is left to the "
                    f"run's teardown, or: kubectl delete jobset -n {namespace} -l {selector}")
    return [n for n in found if n != trigger.name], ""


def _release_lock(trigger: Any, ti: Any) -> None:
    """The run is over for good (marked, or its DAG run deleted): free its run name (blocking; off the loop)."""
    from mtc_provider.triggers.attempt_end import run_lock

    run_name, namespace = trigger.extra["run_name"], trigger.extra.get("namespace") or trigger.namespace
    try:
        lock = run_lock(trigger, ti)
        lock.release()
        trigger.log.info("released run lock %s/%s", namespace, lock.name)
    except Exception as exc:  # noqa: BLE001 - the next run takes a stale lock over (or `mtc unlock`)
        trigger.log.warning("could not release the run lock of %s (%s); the next run takes it over once Airflow shows "
                            "this task ended, or run: mtc unlock %s -n %s", run_name, exc, run_name, namespace)
