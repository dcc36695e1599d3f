"""Write an XCom of a deferred task from its trigger, while the task waits (Task SDK comms; I/O only).

Airflow 3.3's triggerer accepts `SetXCom` from a trigger: it is one of the `ToTriggerSupervisor` message types,
and `TriggerRunnerSupervisor._handle_request` answers it with `handle_set_xcom`, which stores it through the
execution API as a task's own `xcom_push` does (apache/airflow airflow-core/src/airflow/jobs/triggerer_job_runner.py
@3.3.2; task-sdk execution_time/request_handlers.py). So the `progress` XCom moves during the run without waking
the task on a worker. The cncf provider's other way, re-deferring the operator every `logging_interval`
(KubernetesPodOperator.trigger_reentry -> invoke_defer_method), would start a worker process each time.
The value is serialized by the configured XCom backend, as `XCom.set` does.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping


def _message(owner: Mapping[str, Any], key: str, value: Any):
    from mtc_provider.adapters.airflow_private import set_xcom_request, xcom_backend

    map_index = owner.get("map_index", -1)
    map_index = map_index if isinstance(map_index, int) else -1
    serialized = xcom_backend().serialize_value(value=value, key=key, task_id=owner["task_id"], dag_id=owner["dag_id"],
                                      run_id=owner["run_id"], map_index=map_index)
    return set_xcom_request(key=key, value=serialized, dag_id=owner["dag_id"], run_id=owner["run_id"],
                   task_id=owner["task_id"], map_index=map_index)


async def apush_xcom(owner: Mapping[str, Any], key: str, value: Any) -> None:
    """Store `value` under `key` for the task instance `owner` ({dag_id, run_id, task_id, map_index}).

    In the triggerer: through its async comms (`asend`). In a worker (the operator's synchronous path runs the
    trigger there): the task's own comms, off the event loop. Raises when there is no supervisor to ask.
    """
    from mtc_provider.adapters.airflow_private import supervisor_comms

    comms = supervisor_comms()
    if comms is None:
        raise RuntimeError("no Task SDK supervisor in this process: the XCom can only be pushed at the end")
    message = _message(owner, key, value)
    if hasattr(comms, "asend"):
        await comms.asend(message)
    else:
        await asyncio.to_thread(comms.send, message)
