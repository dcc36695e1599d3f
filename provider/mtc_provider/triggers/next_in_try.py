"""The next attempt of a try, submitted from the triggerer: an interruption after progress takes no worker slot.

The steps (close N's record, create N+1 by its deterministic name, open its record, delete the ended attempts,
follow N+1), their order and what a triggerer restart does between them: docs/resubmission.md, "Who submits the
next attempt of a try". Anything that fails before N+1 exists hands the task to a worker (the ENDED event before
the close, `next-attempt-pending` after it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Mapping

from airflow.triggers.base import TriggerEvent

from mtc_provider.core.attempt.jobset_events import NEXT_ATTEMPT_PENDING, STALLED
from mtc_provider.core.attempt.next_in_try import NEXT_ATTEMPT, renumbered
from mtc_provider.core.attempt.status import JobSetState
from mtc_provider.triggers.attempt_end import SYNC_HOOK, sync_hook

KEEP_FAILED = "keep_failed_attempts"  # the operator's `extra` key: how many failed attempts stay for debugging
CREATE_OUTAGE_S = 120.0  # the create waits an unreachable API out this long, then a worker takes over


@dataclasses.dataclass(frozen=True)
class FollowNext:
    """Not an event: the trigger's run goes on watching `trigger` (the next attempt of the same try)."""

    trigger: Any


def allowed(trigger: Any) -> bool:
    """Whether this trigger submits the next attempt of its try itself: the operator rendered one (and so allowed
    it), a training run (not completion mode), and a task instance to write its records for."""
    extra = trigger.extra
    return bool(extra.get(NEXT_ATTEMPT)) and not extra.get("completion") \
        and getattr(trigger, "task_instance", None) is not None


def _run_labels(trigger: Any, ti: Any) -> dict[str, str]:
    from mtc_provider.core.basics import labels as L

    return L.run_labels(ti.dag_id, ti.run_id, ti.task_id, trigger.extra["run_name"])


def _namespace(trigger: Any) -> str:
    return trigger.extra.get("namespace") or trigger.namespace


async def submit_next(trigger: Any, state: JobSetState, restarts: int, verdict: dict[str, Any] | None,
                      cause: str | None = None) -> FollowNext | TriggerEvent | None:
    """After the end of attempt N: follow N+1 (FollowNext), hand the task to a worker that submits it (a
    `next-attempt-pending` TriggerEvent: N's record is closed), or None (not this path: the caller hands the
    verdict to a worker, as before). `cause`: N stalled (core.attempt.jobset_events.stall_cause): it is deleted,
    and gone, between its close and N+1's create (triggers.stall_end)."""
    from mtc_provider.triggers.attempt_end import close_in_trigger, end_of

    if verdict is None or not allowed(trigger):
        return None
    extra, ti = trigger.extra, trigger.task_instance
    # the worker's own rule: not an interruption after progress, or over the run's budget, is the worker's to end
    end = end_of(trigger, state, restarts, verdict, ti, stalled=cause is not None)
    if not end.in_try or await not_this_trys(trigger, ti, "; the task resumes on a worker"):
        return None  # one writer per run: only the try that holds the run lock submits
    trigger.log.info("%s; newest finalized step %s of %s -> %s: %s", state.describe(), verdict["latest_step"],
                     extra.get("target_step"), verdict["kind"], verdict["reason"])
    journal = await close_in_trigger(trigger, state, end, ti, once=True, cause=cause)
    if journal is None:
        return None  # nothing changed: the worker ends the attempt, as before
    if cause is not None:
        from mtc_provider.triggers.stall_end import delete_stalled

        failed = await delete_stalled(trigger, ti, verdict["reason"])
        if failed:  # N may still run: a worker deletes it and waits, as for any stall (its record stays closed)
            return trigger.event(STALLED, state, restarts, failed, verdict)
    return await create_next(trigger, state, restarts, verdict, [*(extra.get("history") or [None]), end.last_step])


async def not_this_trys(trigger: Any, ti: Any, then: str = "") -> str:
    """Why the run lock is not this try's to use from the triggerer, logged with `then` ("" when it is)."""
    try:
        why = await asyncio.to_thread(_not_this_trys_lock, trigger, ti)
    except Exception as exc:  # noqa: BLE001 - unknown: the worker's launch takes the lock and decides
        why = f"it could not be read ({type(exc).__name__}: {exc})"
    if why:
        trigger.log.warning("the run lock of %s is not this try's to use from the triggerer: %s%s",
                            trigger.extra["run_name"], why, then)
    return why


async def create_next(trigger: Any, state: JobSetState | None, restarts: int, verdict: dict[str, Any] | None,
                      next_history: list[int | None]) -> FollowNext | TriggerEvent:
    """Steps 2-5 once N's record is closed (and a stalled N gone): create N+1 by its deterministic name (a 409 of
    this task's is followed), open its record, delete this task's ended attempts, follow N+1; a create that fails
    hands the task to a worker (`next-attempt-pending`)."""
    from mtc_provider.core.attempt.ownership import task_owner

    extra, ti = trigger.extra, trigger.task_instance
    number = int(extra["attempt"]) + 1
    name = f"attempt {number}"
    try:
        hook = await asyncio.to_thread(sync_hook, trigger, CREATE_OUTAGE_S)
        name, body = renumbered(extra[NEXT_ATTEMPT], task_owner(ti), number, next_history)
        obj, created = await asyncio.to_thread(hook.submit_attempt, _namespace(trigger), name, body,
                                               _run_labels(trigger, ti))
    except Exception as exc:  # noqa: BLE001 - a worker plans again and submits it (or fails it for good)
        trigger.log.warning("could not create attempt %d (JobSet %s/%s) from the triggerer (%s: %s): the task "
                            "resumes on a worker to submit it", number, _namespace(trigger), name,
                            type(exc).__name__, exc)
        return trigger.event(NEXT_ATTEMPT_PENDING, state, restarts, f"attempt {number} not created from the "
                              f"triggerer: {type(exc).__name__}: {exc}", verdict)
    if created:
        trigger.log.info("submitted JobSet %s/%s from the triggerer (attempt %d, try %s, newest finalized step %s)",
                         _namespace(trigger), name, number, ti.try_number, next_history[-1])
    else:  # 409: another live copy of this trigger created it (its name is this task's), or this one before
        trigger.log.info("JobSet %s/%s (attempt %d) already exists for this try: following it", _namespace(trigger),
                         name, number)
    follower = await _adopt(trigger, obj, next_history, created)
    await asyncio.to_thread(_delete_ended, trigger, hook, ti, name)
    return FollowNext(follower)


def _not_this_trys_lock(trigger: Any, ti: Any) -> str:
    """Why the run lock is not held by this task for this try ("" when it is): blocking (off the loop)."""
    from mtc_provider.adapters.run_lock import HOLDER, OWNER
    from mtc_provider.triggers.attempt_end import run_lock

    lock = run_lock(trigger)
    data = lock.read()
    if data[HOLDER] != lock.holder:
        return f"it is held by {data[HOLDER] or 'no one'}"
    tried = (data[OWNER] or {}).get("try_number")
    if tried is not None and tried != ti.try_number:
        return f"try {tried} of this task holds it now"
    return lock.elsewhere(data)


async def _adopt(trigger: Any, obj: Mapping[str, Any], history: list[int | None], created: bool = False) -> Any:
    """The trigger that follows attempt `obj` of this try: its record opened in the run lock when missing (the run's
    record then says `running`), its budget judged against every closed attempt before it."""
    from mtc_provider.core.attempt.launch import attempt_of

    name, number = obj["metadata"]["name"], attempt_of(obj)
    from mtc_provider.triggers.attempt_end import push_xcoms

    try:
        records, started, pushed = await asyncio.to_thread(_open_record, trigger, obj, history, created)
    except Exception as exc:  # noqa: BLE001 - the next end (or the worker at the try's end) closes what is there
        trigger.log.warning("could not open the record of attempt %d (JobSet %s) in the run lock (%s: %s); it is "
                            "followed all the same", number, name, type(exc).__name__, exc)
        records, started, pushed = [], time.time(), []
    await push_xcoms(trigger, trigger.task_instance, pushed)
    budget = trigger.extra.get("budget")
    if budget:  # judged against every closed attempt before it, as the operator's `_budget_check`
        from mtc_provider.core.attempt.budget import BudgetCheck

        given = BudgetCheck.from_dict(budget)
        budget = BudgetCheck.for_attempt(given.budget, records, name, given.step_seconds, started).to_dict()
    extra = {**trigger.extra, "attempt": number, "history": history, "budget": budget}
    return following(trigger, name, extra)


def following(trigger: Any, name: str, extra: dict[str, Any]) -> Any:
    """The trigger for another attempt of the same try: the same settings, a fresh per-attempt state (stall and
    progress clocks, ledger writer), from the JobSet's current state (resourceVersion None: a copy that finds it
    created may find it advanced)."""
    follower = type(trigger)(**{**trigger.serialize()[1], "name": name, "resource_version": None,
                                "restarts_seen": 0, "extra": extra})
    follower.task_instance, follower.trigger_id = trigger.task_instance, getattr(trigger, "trigger_id", None)
    if "clock" in vars(trigger):  # a test's clock
        follower.clock = trigger.clock
    if SYNC_HOOK in vars(trigger):  # the same connection: its client (token, connection) serves this try on
        setattr(follower, SYNC_HOOK, getattr(trigger, SYNC_HOOK))
    return follower


def _open_record(trigger: Any, obj: Mapping[str, Any], history: list[int | None],
                 created: bool = False) -> tuple[list[dict], float, list[tuple[str, Any]]]:
    """Open attempt `obj`'s record (not again when the run lock has it), say the run is running, and collect the
    XComs the worker's launch pushes for it (every attempt so far, its console links); blocking."""
    from mtc_provider.adapters import metrics
    from mtc_provider.adapters.attempt_journal import ATTEMPTS_XCOM_KEY
    from mtc_provider.core.attempt.attempt_records import AttemptRecord
    from mtc_provider.core.attempt.launch import attempt_of
    from mtc_provider.core.attempt.run_summary import RUNNING
    from mtc_provider.links.jobset import created_at
    from mtc_provider.triggers.attempt_end import journal_of

    ti = trigger.task_instance
    pushed: list[tuple[str, Any]] = []
    journal = journal_of(trigger, ti, pushed)
    name = obj["metadata"]["name"]
    # created now: its start is now, as the worker's launch records it (the API's creationTimestamp has whole
    # seconds); found (a restart, another copy): when the API created it
    now = time.time()
    record = AttemptRecord(attempt=attempt_of(obj), try_number=ti.try_number, jobset=name,
                           start=now if created else created_at(obj, now), last_step=history[-1])
    records = journal.open(record, history)
    journal.attempts = records
    journal.record_run(RUNNING, "attempt submitted")
    pushed.append((ATTEMPTS_XCOM_KEY, records))  # every attempt so far, this one open (the worker's `_push_run`)
    started = next((r.get("start") for r in records if r.get("jobset") == name), record.start)
    pushed.extend(console_links(trigger.extra[NEXT_ATTEMPT].get("console"), _namespace(trigger), name, started))
    if created:  # counted once, by the copy that created it (the worker's launch counts its own)
        # timed from the previous attempt's end: the new record has none, so the records after its opening serve
        metrics.attempt_submitted(metrics.trigger_tags(trigger), records, record.start)
    return records, started, pushed


def console_links(console: Mapping[str, Any] | None, namespace: str, name: str,
                  start: float | None) -> list[tuple[str, str]]:
    """The attempt's JobSet and pod-logs links (links.jobset: as the worker's `persist_links` stores them for a new
    attempt), from the console scope the operator handed over; empty values on a target without a console."""
    from mtc_provider.links.jobset import JobSetLogsLink, JobSetWorkloadLink, logs_url, workload_url

    if not console:
        return [(JobSetWorkloadLink.key, ""), (JobSetLogsLink.key, "")]
    return [(JobSetWorkloadLink.key, workload_url(console["project_id"], console["location"],
                                                  console["cluster_name"], namespace, name)),
            (JobSetLogsLink.key, logs_url(console["project_id"], console["cluster_name"], namespace, name, start,
                                          None, console.get("replicated_job")))]


def _delete_ended(trigger: Any, hook: Any, ti: Any, current: str) -> None:
    """This task's ended attempts deleted, the newest keep_failed_attempts failed ones kept (hooks.jobset
    `delete_ended`). Best effort: what is left, the next worker of this task or the teardown deletes."""
    from mtc_provider.core.attempt.status import evaluate_jobset

    namespace, run_name = _namespace(trigger), trigger.extra["run_name"]
    try:
        found = hook.this_tasks_jobsets(namespace, run_name, _run_labels(trigger, ti))
        ended = {o["metadata"]["name"]: o for o in found if o["metadata"]["name"] != current
                 and evaluate_jobset(o).ended and not evaluate_jobset(o).terminating}
        hook.delete_ended(trigger.log, ended, list(ended), int(trigger.extra.get(KEEP_FAILED) or 0),
                     f"the attempt's own end, trigger of try {ti.try_number}", run_name, namespace,
                     "after the next attempt was submitted")
    except Exception as exc:  # noqa: BLE001 - an ended JobSet holds no running pods; it is deleted later
        trigger.log.warning("could not delete this task's ended attempts from the triggerer (%s: %s): the next "
                            "worker of this task or the run's teardown deletes them", type(exc).__name__, exc)


async def newest_of_try(trigger: Any) -> Any | None:
    """A trigger that follows the newest attempt of this try when it is newer than the trigger's own (a triggerer
    restart rebuilt it from the kwargs of attempt N after it submitted N+1), else None. A failed listing is None:
    the trigger's own attempt is watched, as before."""
    from mtc_provider.core.attempt.launch import attempt_of, history_of
    from mtc_provider.core.attempt.status import evaluate_jobset
    from mtc_provider.core.basics import labels as L

    if not allowed(trigger):
        return None
    ti, own = trigger.task_instance, int(trigger.extra.get("attempt") or 0)

    def newest() -> Mapping[str, Any] | None:
        found = sync_hook(trigger).this_tasks_jobsets(_namespace(trigger), trigger.extra["run_name"],
                                                  _run_labels(trigger, ti))
        mine = [o for o in found if str((o["metadata"].get("labels") or {}).get(L.TRY_NUMBER)) == str(ti.try_number)
                and attempt_of(o) > own and not evaluate_jobset(o).terminating]
        return max(mine, key=attempt_of) if mine else None

    try:
        obj = await asyncio.to_thread(newest)
    except Exception as exc:  # noqa: BLE001 - its own attempt is watched; a newer one is found at its end
        trigger.log.warning("could not list this task's attempts for a newer one of this try (%s: %s): watching "
                            "JobSet %s/%s", type(exc).__name__, exc, trigger.namespace, trigger.name)
        return None
    if obj is None:
        return None
    history = history_of(obj) or [*(trigger.extra.get("history") or [None]), None]
    trigger.log.info("this try already follows attempt %d (JobSet %s/%s, submitted from the triggerer after attempt "
                     "%d ended): following it, not deciding attempt %d again", attempt_of(obj), trigger.namespace,
                     obj["metadata"]["name"], own, own)
    return await _adopt(trigger, obj, history)
