"""Who may delete a training JobSet, and when a run lock's owner is provably gone: pure decisions over what
Airflow answered about a task instance (airflow.sdk `get_task_states`: its state, or no row at all).

Only three things delete a training JobSet: the attempt's own end, the teardown after the run ended, and a user's
action that was confirmed as one. A kill (a trigger's or a worker's `on_kill`) confirms it by asking Airflow for
the task instance's state now; what cannot be confirmed keeps the JobSet, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# States a user's action leaves behind (mark failed / mark success / skip) or that end a task for good.
TERMINAL_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
CLEARED_STATES = frozenset({"none", "restarting"})  # a user's clear: of a deferred try (None), of a running one: kept


@dataclass(frozen=True)
class TaskLookup:
    """Airflow's answer about one task instance: `found` False means it has no row (its DAG run was deleted)."""

    found: bool
    state: str | None = None

    @property
    def state_name(self) -> str:
        return str(self.state).lower() if self.state is not None else "none"


@dataclass(frozen=True)
class KillVerdict:
    delete: bool  # the JobSet may be deleted: a user's action, confirmed
    run_over: bool  # the task will not run again (marked, or its DAG run deleted): its run lock may go too
    reason: str


def kill_verdict(lookup: TaskLookup | None, who: str, error: str = "") -> KillVerdict:
    """What a cancelled watch (trigger) or a SIGTERM'd try (worker) may do with its JobSet.

    `who` names the task instance ("DAG d, run r, task t, try n"); `lookup` None: Airflow could not be asked
    (`error` says why). Only a try that will never run again deletes: marked (failed, success, skipped,
    upstream_failed, removed) or no row at all (the DAG run was deleted). Every other state keeps the JobSet:
    deferred (the trigger moved), scheduled, queued, running, up_for_retry, and a clear (None, restarting).

    A clear keeps it too, always: Airflow answers the kill None or, when its scheduler was quicker, `scheduled`
    with the next try (clear_task_instances sets None; DagRun.schedule_tis makes it scheduled), and `scheduled`
    is also what a try resumed by its trigger's event shows (Trigger.submit_event), whose worker decides the
    JobSet's fate. No answer tells those apart, so a clear means "run the task again": the next try reattaches
    to the live JobSet. To stop the TPUs a user marks the task failed (docs/resubmission.md).
    """
    if lookup is None:
        return KillVerdict(False, False, f"could not confirm that a user stopped {who} ({error or 'no answer'})")
    if not lookup.found:
        return KillVerdict(True, True, f"the DAG run of {who} no longer exists (deleted by a user)")
    state = lookup.state_name
    if state in TERMINAL_STATES:
        return KillVerdict(True, True, f"{who} was marked {state} (a user's action)")
    if state in CLEARED_STATES:
        return KillVerdict(False, False, f"{who} was cleared by a user (state {state}): a clear runs the task "
                                         "again and its next try reattaches to the JobSet (to stop it: mark the "
                                         "task failed)")
    if state == "deferred":
        # Airflow's state answer names no try: a newer try deferred on a trigger of its own (this one was then
        # cancelled) reads the same as this try's trigger moved, so the message claims neither.
        return KillVerdict(False, False, f"{who}: the task is still deferred, by this try (its trigger moved to "
                                         "another triggerer) or by a newer try (Airflow's answer names no try); "
                                         "the deferred try's trigger keeps watching")
    return KillVerdict(False, False, f"{who} is still alive (state {state}): its owner carries on and "
                                     "reattaches to the JobSet")


def owner_gone(lookup: TaskLookup | None, who: str, error: str = "") -> tuple[bool, str]:
    """(gone, why) for a run lock's owner: gone only when its task instance is terminal or has no row.

    A cleared owner (state None) will run again, up_for_retry too: alive. Unknown is never gone.
    """
    if lookup is None:
        return False, f"could not ask Airflow about {who} ({error or 'no answer'})"
    if not lookup.found:
        return True, f"the DAG run of {who} no longer exists"
    if lookup.state_name in TERMINAL_STATES:
        return True, f"{who} has ended ({lookup.state_name})"
    return False, f"{who} is still {lookup.state_name}"


def task_owner(ti: Any) -> dict[str, Any]:
    """The Airflow ids of a try (raw, not label-shortened): what a run lock records and a kill asks about."""
    map_index = getattr(ti, "map_index", -1)
    return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
            "map_index": map_index if isinstance(map_index, int) else -1, "try_number": getattr(ti, "try_number", None)}


def describe_owner(owner: Mapping[str, Any]) -> str:
    """`DAG d, run r, task t, try n` (map index when mapped) for log lines and errors."""
    text = (f"DAG {owner.get('dag_id')}, run {owner.get('run_id')}, task {owner.get('task_id')}"
            f", try {owner.get('try_number')}")
    map_index = owner.get("map_index")
    return text + (f", map index {map_index}" if isinstance(map_index, int) and map_index >= 0 else "")


OWNER_KEYS = ("dag_id", "run_id", "task_id", "map_index", "try_number")


def foreign_event(deferred_by: Mapping[str, Any] | None, resumed: Mapping[str, Any]) -> str:
    """Why a trigger event is not this try's ("" when it is): `deferred_by` is the owner (task_owner) of the try
    that deferred, echoed back in the event; `resumed` the owner of the try Airflow resumed with it.

    Airflow resumes whatever task instance is deferred on a trigger id when that id's event or failure arrives
    (airflow-core models/trigger.py@3.3.2 `Trigger.submit_event`, `submit_failure`), and the triggerer keys its
    running triggers, events and failures by id (jobs/triggerer_job_runner.py@3.3.2 `update_triggers`). On SQLite
    the trigger id is a rowid without AUTOINCREMENT, so a new trigger reuses the id of the newest one deleted: an
    event of an earlier trigger can reach the next task instance deferred on that id. An event that names no owner
    (a trigger serialized before owners were echoed) is taken as this try's, as before."""
    if not deferred_by:
        return ""
    differs = [key for key in OWNER_KEYS if key in deferred_by and deferred_by.get(key) != resumed.get(key)]
    if not differs:
        return ""
    return (f"the event is of {describe_owner(deferred_by)}'s trigger, and Airflow resumed "
            f"{describe_owner(resumed)} with it ({', '.join(differs)} differ)")
