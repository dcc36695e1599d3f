"""The next attempt after a stall, from the triggerer: a hung attempt takes no worker slot either.

Close N's record with the stall as its interruption, delete N and wait until it is gone, then create and follow N+1
(triggers.next_in_try `create_next`): docs/resubmission.md, "A stall after progress, from the triggerer too". The
record is closed before the delete: a closed record is what tells a stop between the steps (finished by `resumed`)
from a deletion outside this task.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping

from airflow.triggers.base import TriggerEvent

from mtc_provider.core.attempt.jobset_events import STALLED
from mtc_provider.core.attempt.status import JobSetState
from mtc_provider.triggers.next_in_try import FollowNext

DELETE_BUDGET_S = 60.0  # the delete is retried this long through a short API outage, then a worker takes over
GONE_POLL_S = 2.0  # at most this long between reads of the deleted JobSet (no thread is held while waiting)


async def next_after_stall(trigger: Any, state: JobSetState, restarts: int, kind: str,
                           message: str) -> FollowNext | TriggerEvent | None:
    """After attempt N stalled (`kind` stalled, or startup-timeout): follow N+1 (FollowNext), hand the task to a
    worker (an event), or None: not this path (the caller's own event goes to a worker, as before)."""
    from mtc_provider.core.attempt.jobset_events import stall_cause
    from mtc_provider.core.attempt.resubmission import decide_stalled
    from mtc_provider.triggers.attempt_end import sync_hook, verdict_on_listing
    from mtc_provider.triggers.next_in_try import allowed, submit_next

    extra = trigger.extra
    if not allowed(trigger) or extra.get("target_step") is None or not trigger.checkpoint_dir:
        return None
    try:  # the JobSet's own count, read before the delete (the worker's `restarts_now`)
        restarts = max(restarts, (await asyncio.to_thread(lambda: sync_hook(trigger).status(
            trigger.name, trigger.namespace))).restarts)
    except Exception:  # noqa: BLE001 - the count this watch saw stands
        restarts = max(restarts, state.restarts)
    history = extra.get("history") or [None]
    cause = stall_cause(kind, restarts, trigger.restored_step, history)
    if cause is None:
        return None
    verdict = await verdict_on_listing(trigger, "after the stall", lambda latest: decide_stalled(
        latest, int(extra["target_step"]), history, int(extra.get("crash_loop_attempts") or 1), why=message,
        restored_step=trigger.restored_step))
    if verdict is None:
        return None
    await trigger.facts().flush(trigger, trigger.clock(), final=True)  # before the close reads the ledger
    return await submit_next(trigger, state, restarts, verdict, cause)


async def delete_stalled(trigger: Any, ti: Any, why: str) -> str:
    """Delete attempt N's JobSet (foreground) and wait until it is gone: "" then, else the stall's event message
    that hands the task to a worker. Every call off the loop; no thread is held between the reads."""
    from mtc_provider.adapters.kill_delete import adelete_within
    from mtc_provider.adapters.protocols import NotFound
    from mtc_provider.core.basics.vocabulary import DELETE_ATTEMPT_FAILED
    from mtc_provider.triggers.attempt_end import sync_hook

    namespace, name = trigger.namespace, trigger.name
    where, why = f"{namespace}/{name}", why.split(" (", 1)[0]  # the stall's own sentence
    trigger.log.warning("deleting stalled JobSet %s (checkpoints are kept) and waiting until its pods are gone, "
                        "before the next attempt: asked by the attempt's own end (%s), trigger of try %s", where,
                        why, ti.try_number)
    try:
        failed = await adelete_within(lambda: asyncio.to_thread(
            lambda: sync_hook(trigger).delete(name, namespace, DELETE_ATTEMPT_FAILED)), DELETE_BUDGET_S)
    except Exception as exc:  # noqa: BLE001 - not an outage (a 403, a 401): a worker deletes it
        failed = f"{type(exc).__name__}: {exc}"
    timeout = float(trigger.watch.times.deletion_timeout)  # the operator's deletion_timeout
    deadline = time.monotonic() + timeout
    while not failed:
        try:
            await asyncio.to_thread(lambda: sync_hook(trigger).api.get(namespace, name))
        except NotFound:
            trigger.log.info("JobSet %s is gone, its pods with it", where)
            return ""
        except Exception as exc:  # noqa: BLE001 - unknown whether it went: a worker waits for it
            failed = f"reading it failed ({type(exc).__name__}: {exc})"
        else:
            if time.monotonic() >= deadline:
                failed = f"still terminating after {timeout:.0f}s (foreground deletion waits for its pods)"
            else:
                await asyncio.sleep(min(float(trigger.watch.times.poll_interval), GONE_POLL_S))
    trigger.log.warning("could not delete stalled JobSet %s from the triggerer (%s): the task resumes on a worker "
                        "to delete it and submit the next attempt", where, failed)
    # the worker's stall reason: the stall, then why the triggerer left it
    return f"{why}; the triggerer could not delete JobSet {where} and see it gone: {failed}"


async def resumed(trigger: Any) -> FollowNext | TriggerEvent | None:
    """What a trigger does before watching its own attempt N, at its start and once N is deleted: follow a newer
    attempt of its try (triggers.next_in_try `newest_of_try`), or finish a stall's end that a triggerer restart or
    another copy of it left after N's close (delete N, create N+1, follow it); None: watch N."""
    from mtc_provider.core.attempt.resubmission import RETRY
    from mtc_provider.triggers.next_in_try import allowed, create_next, newest_of_try, not_this_trys

    newer = await newest_of_try(trigger)
    if newer is not None:
        return FollowNext(newer)
    if not allowed(trigger):
        return None
    ti = trigger.task_instance
    try:
        record = await asyncio.to_thread(_closed_after_stall, trigger, ti)
    except Exception as exc:  # noqa: BLE001 - its own attempt is watched
        trigger.log.warning("could not read the record of JobSet %s/%s in the run lock (%s: %s): watching it",
                            trigger.namespace, trigger.name, type(exc).__name__, exc)
        return None
    if record is None:
        return None
    if await not_this_trys(trigger, ti):
        return None
    trigger.log.info("attempt %s (JobSet %s/%s) was closed in this try after it stalled, and its next attempt does "
                     "not exist yet: finishing its end (%s)", record.get("attempt"), trigger.namespace, trigger.name,
                     record.get("reason"))
    verdict = {"kind": RETRY, "reason": record.get("reason") or "", "latest_step": record.get("last_step")}
    failed = await delete_stalled(trigger, ti, verdict["reason"])
    if failed:
        return trigger.event(STALLED, None, trigger.restarts_seen, failed, verdict)
    history = trigger.extra.get("history") or [None]
    return await create_next(trigger, None, trigger.restarts_seen, verdict, [*history, record.get("last_step")])


def _closed_after_stall(trigger: Any, ti: Any) -> Mapping[str, Any] | None:
    """The run lock's record of this trigger's attempt when this try closed it as followed in the try while its
    JobSet had not ended (only a stall's end in the triggerer does that: an interruption's JobSet has ended, and the
    worker deletes a stalled one before closing it); else None. Blocking (off the loop)."""
    from mtc_provider.adapters.protocols import NotFound
    from mtc_provider.adapters.run_lock import ATTEMPTS
    from mtc_provider.core.attempt.status import evaluate_jobset
    from mtc_provider.triggers.attempt_end import run_lock, sync_hook

    record = next((r for r in run_lock(trigger).read()[ATTEMPTS] if r.get("jobset") == trigger.name), None)
    if record is None or record.get("end") is None or not record.get("in_try") \
            or record.get("try") != ti.try_number:
        return None
    try:
        if evaluate_jobset(sync_hook(trigger).api.get(trigger.namespace, trigger.name)).ended:
            return None  # an interruption's end: its watch sees it ended, and next_in_try goes on from there
    except NotFound:
        pass
    return record
