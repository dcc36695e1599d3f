"""What the JobSet trigger hands back to the operator and the sensor: event kinds and one typed event.

Kept apart from the trigger (which pulls Airflow's trigger machinery) so operators, and the DAG files that import
them, stay light at parse time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from mtc_provider.core.attempt.status import JobSetState

ENDED = "ended"
DELETED = "deleted"
STALLED = "stalled"
ERROR = "error"
UNSTARTABLE = "unstartable"  # a pod can never start (bad image, bad config): no retry helps
STARTUP_TIMEOUT = "startup-timeout"  # pods waited for capacity longer than startup_timeout
LISTING_FAILED = "listing-failed"  # the checkpoint listing kept failing for listing_timeout
FORBIDDEN = "forbidden"  # the triggerer's identity may not read what the watch needs (HTTP 403): no retry helps
API_UNREACHABLE = "api-unreachable"  # the Kubernetes API stayed unreachable for api_outage_timeout: not an attempt
# the trigger closed an attempt followed in the same try but could not create the next one: a worker submits it
NEXT_ATTEMPT_PENDING = "next-attempt-pending"


@dataclass(frozen=True)
class JobSetEvent:
    """What the trigger hands back to the operator or sensor."""

    kind: str  # ended | deleted | stalled | error | unstartable | startup-timeout | listing-failed | forbidden
    #   | api-unreachable | next-attempt-pending
    namespace: str
    name: str
    state: JobSetState | None = None
    restarts_seen: int = 0
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] | None = None  # the trigger's latest progress report (ProgressReport.to_xcom())
    # the newest step a start of the pods restored (MaxText's restore line in the leader's log), from any tier
    restored_step: int | None = None
    # the trigger's decision on an ended attempt (core.attempt.resubmission: kind, reason) and the newest restorable
    # step it was made on (`latest_step`); None: not decided there (a listing that failed, a bare watch)
    verdict: dict[str, Any] | None = None

    def to_payload(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["state"] = asdict(self.state) if self.state else None
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "JobSetEvent":
        values = dict(payload)
        state = values.pop("state", None)
        return cls(state=JobSetState(**state) if state else None, **values)


def stall_cause(kind: str, restarts: int, restored_step: int | None, history: Sequence[int | None]) -> str | None:
    """The interruption's kind in the run's ledger (core.attempt.ledger) when an event that is no JobSet end is
    judged as a stall (core.attempt.resubmission.decide_stalled: the attempt is deleted, then followed or not on its
    steps): `stall` for a stall; `startup-timeout` for new pods that never came up after the run's pods had started
    (in-cluster `restarts`, a `restored_step`, or a step in the attempts' `history`: a replacement node whose
    ramdisk never mounts; a new attempt gets new pods). None: not a stall (a start-up timeout before the run ever
    started is a failure to start, which fails the run)."""
    from mtc_provider.core.attempt.ledger import STALL, STARTUP_TIMEOUT as STARTUP

    if kind == STALLED:
        return STALL
    if kind == STARTUP_TIMEOUT and (restarts > 0 or restored_step is not None
                                    or any(step is not None for step in history)):
        return STARTUP
    return None
