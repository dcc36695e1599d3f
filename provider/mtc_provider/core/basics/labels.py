"""Labels that identify a run's JobSet, so a retry finds (and reattaches to) what an earlier try created."""

from __future__ import annotations

import hashlib
from typing import Mapping

from mtc_provider.core.basics.names import label_value  # the one shortening function (hash suffix), used everywhere
from mtc_provider.core.basics.vocabulary import (  # noqa: F401 - the label keys, under this module's short names
    ATTEMPT_LABEL as ATTEMPT,
    COMPLETION_INDEX_LABEL,
    DAG_ID_LABEL as DAG_ID,
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    LABEL_PREFIX as PREFIX,
    MANAGED_BY_LABEL as MANAGED_BY,
    MANAGED_BY_VALUE,
    RESTART_ATTEMPT_LABEL,
    RUN_ID_LABEL as RUN_ID,
    RUN_NAME_LABEL as RUN_NAME,
    TASK_ID_LABEL as TASK_ID,
    TRY_NUMBER_LABEL as TRY_NUMBER,
)


def run_labels(dag_id: str, run_id: str, task_id: str, run_name: str) -> dict[str, str]:
    """Labels that stay the same across tries of one task in one DAG run (the reattach key)."""
    return {DAG_ID: label_value(dag_id), RUN_ID: label_value(run_id), TASK_ID: label_value(task_id),
            RUN_NAME: label_value(run_name), MANAGED_BY: MANAGED_BY_VALUE}


def belongs_to(labels: Mapping[str, str] | None, run_labels: Mapping[str, str]) -> bool:
    """True when a JobSet with `labels` is an attempt of this task in this DAG run (every run label equal).

    The DAG run id is part of the key: another DAG run of the same DAG, task and run name is someone else.
    """
    labels = labels or {}
    return all(labels.get(key) == value for key, value in run_labels.items())


def lock_name(run_name: str) -> str:
    """The name of the run's lock object (one per run name and namespace): a DNS-1123 name <= 63."""
    name = f"mtc-run-{run_name}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(run_name.encode()).hexdigest()[:8]
    return f"{name[: 63 - len(digest) - 1].rstrip('-')}-{digest}"


def selector(labels: dict[str, str]) -> str:
    """A Kubernetes label selector string for equality on every label."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def attempt_number(labels: Mapping[str, str] | None) -> int:
    """An attempt's number from its JobSet's labels: the attempt label, else (JobSets submitted before attempts
    had their own number) the try-number label; 0 when neither is a number."""
    labels = labels or {}
    for key in (ATTEMPT, TRY_NUMBER):
        value = str(labels.get(key, ""))
        if value.isdigit():
            return int(value)
    return 0
