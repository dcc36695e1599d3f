"""How many interruptions of each kind a run survived, from its attempt records (the run lock's, the `attempts`
XCom, the run's record beside its checkpoints): what `mtc status` and the run view show.

Kinds (an ended attempt's record carries its own in `interruption`, set when the attempt is closed):
- graceful: the JobSet completed below the target step: a preemption or maintenance event (SIGTERM; MaxText
  saves and exits 0);
- failed: the JobSet failed retryably (host losses beyond `maxRestarts`) or the attempt stalled;
- restarts: in-cluster restarts (JobSet's `status.restarts`, summed over attempts): host or slice losses JobSet
  recovered from without a new attempt.
`in_try` counts the attempts that were followed in the same Airflow try (they progressed: no retry spent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

from mtc_provider.core.attempt.outcomes import DISRUPTED

if TYPE_CHECKING:  # the record's module imports this one
    from mtc_provider.core.attempt.attempt_records import AttemptRecord

GRACEFUL = "graceful"
FAILED = "failed"
KINDS = (GRACEFUL, FAILED)
COMPLETED_BELOW_TARGET = "completed below target"  # core.attempt.resubmission.decide's reason for a graceful end


def interruption_of(phase_succeeded: bool) -> str:
    """The kind of a retryable end: a JobSet that completed (below target) ended gracefully; else it failed."""
    return GRACEFUL if phase_succeeded else FAILED


def _kind(record: AttemptRecord) -> str | None:
    if record.outcome != DISRUPTED:
        return None
    # a record closed before records had `interruption`: its reason says which
    return record.interruption or (GRACEFUL if COMPLETED_BELOW_TARGET in record.reason else FAILED)


def count(attempts: Iterable[AttemptRecord]) -> dict[str, int]:
    """{"graceful": n, "failed": n, "restarts": n, "in_try": n} over a run's attempt records."""
    counts = {GRACEFUL: 0, FAILED: 0, "restarts": 0, "in_try": 0}
    for record in attempts:
        kind = _kind(record)
        if kind:
            counts[kind] += 1
        counts["in_try"] += record.in_try
        counts["restarts"] += record.restarts
    return counts


def summary(counts: Mapping[str, int]) -> str:
    """One line for people: `interruptions survived: 7 graceful (preemption/maintenance), 2 failed, 3 in-cluster
    restarts; 8 attempts followed in the same try (no Airflow retry spent)`."""
    return (f"interruptions survived: {counts.get(GRACEFUL, 0)} graceful (preemption/maintenance), "
            f"{counts.get(FAILED, 0)} failed (restarts used up, stalls), {counts.get('restarts', 0)} in-cluster "
            f"restarts; {counts.get('in_try', 0)} attempts followed in the same try (no Airflow retry spent)")
