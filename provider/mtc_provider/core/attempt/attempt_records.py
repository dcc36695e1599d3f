"""A run's attempt records (pure): the typed record both ends of a try write (`AttemptRecord`), the rule that
closes it when an attempt ends (`end_of_attempt`), and the in-cluster restarts read back from the records.

The records live in the run lock while the run goes on (adapters.run_lock), are pushed as the launch task's
`attempts` XCom, and are copied into the run's record beside its checkpoints (adapters.run_records); the run view,
`mtc status`, goodput and the CLI read them back, typed, through `read_attempts` (`AttemptRecord.to_dict` is their
one shape): a value of the wrong type is refused naming the field, the value and what is allowed. A field left out
is taken as `from_dict` takes it: records written before a field existed keep loading (0.1.0's have no `try`,
`interruption` or `in_try`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.attempt.interruptions import KINDS, interruption_of
from mtc_provider.core.attempt.outcomes import DISRUPTED, FAILED_OUTCOME, FINISHED, OUTCOMES
from mtc_provider.core.attempt.budget import BudgetCheck
from mtc_provider.core.attempt.resubmission import (FAIL, RETRY, SUCCEED, Decision, in_try_line, resubmission_line,
                                                    restorable_progress, resubmit_in_try)
from mtc_provider.core.attempt.run_summary import FAILED as FAILED_RUN, RETRYING, SUCCEEDED as SUCCEEDED_RUN

REACHED_TARGET = "training reached its target"  # the run record's reason when an attempt ends the run well

_COUNT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a non-negative integer")
_SECONDS = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "epoch seconds")
_TEXT = (lambda v: isinstance(v, str), "a text")
# Each stored key: when set (not None), what its value must be, and the words for the error.
FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "attempt": _COUNT, "try": _COUNT, "restarts": _COUNT, "last_step": _COUNT, "start": _SECONDS, "end": _SECONDS,
    "jobset": _TEXT, "reason": _TEXT, "outcome": (lambda v: v in OUTCOMES, " or ".join(OUTCOMES)),
    "interruption": (lambda v: v in KINDS, " or ".join(KINDS)),
    "in_try": (lambda v: isinstance(v, bool), "true or false"),
}


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt (one JobSet) of a run, opened when it is submitted and closed when it ends.

    `interruption` (core.attempt.interruptions) and `in_try` (followed in the same Airflow try) exist only on a closed
    retryable end: `to_dict` leaves them out otherwise, as the stored records always did.
    """

    attempt: int
    jobset: str
    start: float | None
    try_number: int | None = None
    end: float | None = None
    outcome: str | None = None  # core.attempt.outcomes
    restarts: int = 0  # the JobSet's status.restarts (JobSet counts every failurePolicy restart there)
    last_step: int | None = None  # the newest finalized step: when it started, then when it ended
    reason: str = ""  # the decision's reason
    interruption: str | None = None
    in_try: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = {"attempt": self.attempt, "try": self.try_number, "jobset": self.jobset, "start": self.start,
                "end": self.end, "outcome": self.outcome, "restarts": self.restarts, "last_step": self.last_step,
                "reason": self.reason}
        if self.interruption:
            data.update(interruption=self.interruption, in_try=bool(self.in_try))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "attempt") -> "AttemptRecord":
        """The record of a stored dict; SpecError naming `where.key` (`where` when it is no dict) on a bad value."""
        if not isinstance(data, Mapping):
            raise SpecError(where, data, "an attempt record {attempt, jobset, start, end, outcome, ...}")
        for key, (fits, allowed) in FIELDS.items():
            if data.get(key) is not None and not fits(data[key]):
                raise SpecError(f"{where}.{key}", data[key], allowed)
        return cls(attempt=data.get("attempt"), jobset=str(data.get("jobset") or ""), start=data.get("start"),
                   try_number=data.get("try"), end=data.get("end"), outcome=data.get("outcome"),
                   restarts=data.get("restarts") or 0, last_step=data.get("last_step"),
                   reason=str(data.get("reason") or ""), interruption=data.get("interruption"),
                   in_try=bool(data.get("in_try")))

    def closed(self, end: "AttemptEnd", now: float) -> "AttemptRecord":
        return replace(self, end=now, outcome=end.outcome, restarts=end.restarts, last_step=end.last_step,
                       reason=end.reason, interruption=end.interruption, in_try=end.in_try if end.interruption
                       else self.in_try)


def read_attempts(value: Any, field: str = "attempts") -> list[AttemptRecord]:
    """The records of `value` (None: none), oldest first as given; SpecError naming `field[i].key` on a bad one."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise SpecError(field, value, "a list of attempt records")
    return [AttemptRecord.from_dict(item, f"{field}[{index}]") for index, item in enumerate(value)]


@dataclass(frozen=True)
class AttemptEnd:
    """One ended attempt as decided, whichever process ends it (the worker or the triggerer): what its record, the
    run's record and the task log say. `line` is what follows, said once: the run record's reason, and the
    message the try ends with."""

    jobset: str
    namespace: str
    attempt: int
    kind: str  # core.attempt.resubmission's decision kind
    reason: str
    restarts: int
    last_step: int | None
    outcome: str
    interruption: str | None
    in_try: bool
    run_state: str  # core.attempt.run_summary: succeeded, retrying or failed
    line: str
    in_try_from: int | None = None  # the attempt's start step, when the same try follows it

    @classmethod
    def failed(cls, *, jobset: str, namespace: str, attempt: int, restarts: int, latest: int | None,
               reason: str) -> "AttemptEnd":
        """An attempt that ends the run for good without a decision on its steps (deleted outside the task, or its
        pods could never start)."""
        return cls(jobset=jobset, namespace=namespace, attempt=attempt, kind=FAIL, reason=reason, restarts=restarts,
                   last_step=latest, outcome=FAILED_OUTCOME, interruption=None, in_try=False, run_state=FAILED_RUN,
                   line=reason)


def end_of_attempt(decision: Decision, *, jobset: str, namespace: str, attempt: int, restarts: int,
                   latest: int | None, history: Sequence[int | None], phase_succeeded: bool, try_number: int,
                   max_tries: int | None, target_step: int | None, last_try: bool, completion: bool = False,
                   stalled: bool = False, restored: int | None = None, budget: BudgetCheck | None = None,
                   now: float | None = None, steps_per_hour: float | None = None) -> AttemptEnd:
    """The one rule for closing an attempt: its outcome, its interruption's kind, whether the same try follows it
    (an interruption after progress: core.attempt.resubmission.resubmit_in_try), the run's state and the line said.

    A stalled attempt is never `failed` in its record (it was deleted; a crash loop of stalls ends the run). Its
    `last_step` is its restorable progress: the newest finalized step, or a newer step a start of its pods restored
    (`restored`); the next attempt's start step carries it on (core.attempt.launch.plan_launch).

    A retry is judged against the run's `budget` (core.attempt.budget) at `now`: over it, the run fails for good
    with the budget's numbers, in the same try or not."""
    history = list(history) or [None]
    latest = restorable_progress(latest, restored)
    if budget is not None and decision.kind == RETRY and not completion and now is not None:
        over = budget.verdict(history[-1], latest, restarts, now, steps_per_hour)
        if over:
            decision = Decision(FAIL, over)
    if stalled:
        outcome = FINISHED if decision.kind == SUCCEED else DISRUPTED
    else:
        outcome = {SUCCEED: FINISHED, FAIL: FAILED_OUTCOME}.get(decision.kind, DISRUPTED)
    interruption = interruption_of(phase_succeeded and not stalled) if outcome == DISRUPTED else None
    in_try = not completion and resubmit_in_try(decision, history, latest)
    reason = decision.reason
    if in_try:
        state, line = RETRYING, in_try_line(reason, history[-1], latest, int(attempt or 0) + 1, target_step)
    elif decision.kind == SUCCEED:
        state, line = SUCCEEDED_RUN, REACHED_TARGET
    elif decision.kind == FAIL:
        state, line = FAILED_RUN, reason
    elif last_try:
        state, line = FAILED_RUN, f"{reason}; no retry left (try {try_number} was the last)"
    else:
        state, line = RETRYING, resubmission_line(reason, latest, try_number, max_tries, target_step)
    return AttemptEnd(jobset=jobset, namespace=namespace, attempt=attempt, kind=decision.kind, reason=reason,
                      restarts=restarts, last_step=latest, outcome=outcome, interruption=interruption, in_try=in_try,
                      run_state=state, line=line, in_try_from=history[-1] if in_try else None)


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
