"""Extra links whose values the operators persist in XCom at run time (gcp.py, jobset.py, goodput.py)."""

from __future__ import annotations

from typing import Any


def stored_value(key: str, ti_key: Any) -> Any:
    """What the task persisted under `key` for its link, or None when it persisted nothing.

    Airflow 3's task runner asks every extra link of a task for its URL when the task ends (task_runner.finalize),
    also links the task never set (the cluster link on the local target, which has no console; the bucket link of
    a readiness task). `XCom.get_value` reads one XCom and, when there is none, the task SDK's client logs an
    error ("XCom not found") in the task's log; `XCom.get_all` reads the same row (all map indexes of the task)
    and answers an empty list instead. A mapped task's own map index is read with get_value.
    """
    from mtc_provider.adapters.airflow_private import xcom_backend

    XCom = xcom_backend()
    map_index = getattr(ti_key, "map_index", -1)
    if map_index is not None and map_index >= 0:
        return XCom.get_value(key=key, ti_key=ti_key)
    values = XCom.get_all(key=key, dag_id=ti_key.dag_id, task_id=ti_key.task_id, run_id=ti_key.run_id)
    return values[-1] if values else None
