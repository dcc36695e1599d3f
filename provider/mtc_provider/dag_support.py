"""Glue the sample DAGs call from inside tasks (never at parse time)."""

from __future__ import annotations

from typing import Any, Mapping


def plan_training_run(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate the trigger form; a bad value fails the run at once (no retry), naming the field."""
    # Imported where it runs: DAG files import `planned` at parse time and must not pull the spec machinery.
    from airflow.sdk.exceptions import AirflowFailException

    from mtc_provider.core.errors import SpecError
    from mtc_provider.core.params import training_run
    from mtc_provider.target import default_local_home

    try:
        return training_run(dict(params or {}), default_local_home())
    except SpecError as err:
        raise AirflowFailException(f"invalid run description: {err}") from err


def planned(key: str, task_id: str = "plan") -> str:
    """A template for one field of the plan task's result (render it with render_template_as_native_obj)."""
    return "{{ ti.xcom_pull(task_ids='" + task_id + "')['" + key + "'] }}"
