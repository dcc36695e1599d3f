"""Ask Airflow, through the Task SDK, for a task instance's state now.

`RuntimeTaskInstance.get_task_states` sends `GetTaskStates` to the process's supervisor: the worker's task
supervisor, or the triggerer's (TriggerRunnerSupervisor handles it with `handle_get_task_states`), which asks
the execution API (`GET /execution/task-instances/states`). No row for the run means the DAG run is gone
(apache/airflow airflow-core/src/airflow/api_fastapi/execution_api/routes/task_instances.py@3.3.2,
`get_task_instance_states`). This is how cncf.kubernetes' KubernetesPodTrigger.get_task_state asks, too.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

from mtc_provider.core.attempt.ownership import TaskLookup


def _key(task_id: str, map_index: int | None) -> str:
    # The /states answer suffixes a mapped task instance's key with `_<map_index>`.
    return f"{task_id}_{map_index}" if map_index is not None and map_index >= 0 else task_id


def lookup_task_state(dag_id: str, run_id: str, task_id: str, map_index: int | None = -1) -> TaskLookup:
    """This task instance's state now; raises when Airflow cannot be asked (no supervisor, an API error)."""
    from mtc_provider.adapters.airflow_private import get_task_states

    states = get_task_states(dag_id=dag_id, task_ids=[task_id], run_ids=[run_id],
                             map_index=map_index if map_index is not None and map_index >= 0 else None)
    return _from_states(states, {"run_id": run_id, "task_id": task_id, "map_index": map_index})


def _from_states(states: Any, owner: Mapping[str, Any]) -> TaskLookup:
    """TaskLookup from a GetTaskStates answer ({run_id: {task key: state}}); no key: the run is gone."""
    if not isinstance(states, Mapping):
        raise RuntimeError(f"unexpected answer to GetTaskStates: {states!r}")
    run = states.get(owner["run_id"]) or {}
    key = _key(owner["task_id"], owner.get("map_index", -1))
    if key not in run:
        return TaskLookup(found=False)
    return TaskLookup(found=True, state=run[key])


def try_lookup(owner: Mapping[str, Any]) -> tuple[TaskLookup | None, str]:
    """(lookup, "") or (None, why it failed) for an owner record {dag_id, run_id, task_id, map_index}."""
    try:
        return lookup_task_state(owner["dag_id"], owner["run_id"], owner["task_id"], owner.get("map_index", -1)), ""
    except Exception as exc:  # noqa: BLE001 - unknown is an answer too: the caller keeps what it has
        return None, f"{type(exc).__name__}: {exc}"


async def atry_lookup(owner: Mapping[str, Any]) -> tuple[TaskLookup | None, str]:
    """`try_lookup` from a trigger: on the event loop through the triggerer's async comms (`asend`, as
    TriggerCommsDecoder offers), else off the loop (the sync send blocks until the supervisor answers)."""
    from mtc_provider.adapters.airflow_private import get_task_states_request, supervisor_comms

    comms = supervisor_comms()
    if comms is None or not hasattr(comms, "asend"):
        return await asyncio.to_thread(try_lookup, owner)
    try:
        map_index = owner.get("map_index", -1)
        answer = await comms.asend(get_task_states_request(
            dag_id=owner["dag_id"], task_ids=[owner["task_id"]], run_ids=[owner["run_id"]],
            map_index=map_index if map_index is not None and map_index >= 0 else None))
        return _from_states(getattr(answer, "task_states", answer), owner), ""
    except Exception as exc:  # noqa: BLE001 - unknown is an answer too: the caller keeps what it has
        return None, f"{type(exc).__name__}: {exc}"
