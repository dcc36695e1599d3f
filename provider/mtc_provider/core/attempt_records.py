"""In-cluster restarts of a run, read from the launch operator's attempt records (pure).

The launch operator keeps one record per attempt in the run lock and pushes them all as the `train` task's
`attempts` XCom (adapters/run_lock.py `RunLock.close_attempt`, operators/jobset.py `_push`):
`{"attempt": try, "jobset": name, "restarts": n, ...}`, where `restarts` is the JobSet's `status.restarts` as the launch trigger last saw it (JobSet counts every
failurePolicy restart there). Summing those is the run's in-cluster restart count: it needs no guess from the
names of the runner's log folders, and it reads the same on GKE as on the local target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from mtc_provider.core.errors import SpecError


@dataclass(frozen=True)
class RestartCount:
    """The restarts of each attempt's JobSet (try number -> restarts) and their sum."""

    by_attempt: dict[int, int]

    @property
    def total(self) -> int:
        return sum(self.by_attempt.values())

    def describe(self) -> str:
        """`3 (attempt 1: 1, attempt 2: 2)`, or `0` for a run that never restarted in the cluster."""
        if not self.total:
            return "0"
        return f"{self.total} (" + ", ".join(f"attempt {a}: {n}" for a, n in sorted(self.by_attempt.items())) + ")"


def _count(index: int, record: Mapping[str, Any], key: str) -> int:
    value = record.get(key)
    if value is None and key == "restarts":  # an attempt whose JobSet status was never read
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"attempts[{index}].{key}", value, "a non-negative integer")
    return value


def in_cluster_restarts(records: Iterable[Mapping[str, Any]]) -> RestartCount:
    """The restarts each attempt's JobSet recorded, one figure per JobSet (a record pushed again by a
    reattached try counts once, with the larger figure: a JobSet's restarts only grow)."""
    by_jobset: dict[str, tuple[int, int]] = {}
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise SpecError(f"attempts[{index}]", record, "an attempt record {attempt, jobset, restarts, ...}")
        attempt, restarts = _count(index, record, "attempt"), _count(index, record, "restarts")
        key = str(record.get("jobset") or f"attempt {attempt}")
        by_jobset[key] = (attempt, max(restarts, by_jobset.get(key, (attempt, 0))[1]))
    by_attempt: dict[int, int] = {}
    for attempt, restarts in by_jobset.values():
        by_attempt[attempt] = by_attempt.get(attempt, 0) + restarts
    return RestartCount(by_attempt)
