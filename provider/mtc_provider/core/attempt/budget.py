"""The run's budget (pure): a run that keeps being interrupted without getting anywhere ends, with the numbers.

Both rules count restorable progress only (core.attempt.resubmission.restorable_progress), never reported step
lines: the newest `window` interruptions (attempt ends and in-cluster restarts) must each gain more than
`min_steps_per_interruption` restorable steps (default: the shortest restorable save period, which a healthy run
passes many times between interruptions and a crash after every save does not), and the steps gained over the last
`goodput_window` must reach `min_goodput` of it (judged once the run has lasted the window and has a step time, so
a short run or a long wait for capacity is never ended by it). docs/resubmission.md, "The budget", works examples.

The attempts before the current one are fixed while it runs, so the worker and the triggerer judge its end from the
same values (`BudgetCheck`, carried to the trigger as a dict).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from mtc_provider.core.attempt.outcomes import FINISHED
from mtc_provider.core.basics.errors import SpecError, finite_number, integer

DEFAULT_WINDOW = 6  # interruptions; 0 turns the progress rule off
DEFAULT_MIN_GOODPUT = 0.1  # a tenth of the wall-clock time kept as restorable training
DEFAULT_GOODPUT_WINDOW_S = 6 * 3600.0  # several persistent saves at the guide's hourly cadence
DERIVED = "derived"


@dataclass(frozen=True)
class Budget:
    """The run's budget settings, parsed (`parse`) from the operator's fields."""

    window: int = DEFAULT_WINDOW
    min_steps_per_interruption: int | None = None  # None: no save period known, the progress rule is off
    min_goodput: float = DEFAULT_MIN_GOODPUT  # 0: the goodput rule is off
    goodput_window: float = DEFAULT_GOODPUT_WINDOW_S

    @classmethod
    def parse(cls, window: Any, min_steps: Any, min_goodput: Any, goodput_window: Any,
              derived_steps: int | None) -> "Budget":
        """From rendered fields (text or numbers); SpecError names the field, the value and what is allowed."""
        count = integer("budget_interruptions", window, "an integer >= 0 (0: no progress-per-interruption rule)")
        if min_steps in (None, "", DERIVED):
            steps = derived_steps
        else:
            steps = integer("min_steps_per_interruption", min_steps,
                            f'an integer >= 1 (restorable steps), or "{DERIVED}" (the shortest save period)', 1)
        share = finite_number("min_goodput", min_goodput, "a fraction >= 0 and < 1 (0: no goodput rule)")
        if not 0 <= share < 1:
            raise SpecError("min_goodput", min_goodput, "a fraction >= 0 and < 1 (0: no goodput rule)")
        seconds = finite_number("goodput_window", goodput_window, "a positive number of seconds", low=0, strict=True)
        return cls(count, steps, share, seconds)


@dataclass(frozen=True)
class Span:
    """One attempt: the restorable step it started from and ended at (None: none yet), its interruptions (its own
    end unless it finished, plus its in-cluster restarts) and its wall-clock start and end (unix s)."""

    start_step: int | None
    end_step: int | None
    interruptions: int
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True)
class BudgetCheck:
    """What an attempt's end is judged with: the settings and the attempts before it (fixed while it runs)."""

    budget: Budget
    earlier: tuple[Span, ...] = ()
    started: float | None = None  # the current attempt's start
    step_seconds: float | None = None  # the run's step time when known up front

    def to_dict(self) -> dict[str, Any]:
        return {"budget": asdict(self.budget), "earlier": [asdict(s) for s in self.earlier],
                "started": self.started, "step_seconds": self.step_seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BudgetCheck":
        return cls(Budget(**data["budget"]), tuple(Span(**s) for s in data.get("earlier") or ()),
                   data.get("started"), data.get("step_seconds"))

    @classmethod
    def for_attempt(cls, budget: Budget, records: Sequence[Mapping[str, Any]], jobset: str,
                    step_seconds: float | None, started: float | None = None) -> "BudgetCheck":
        """Attempt `jobset`'s check: every closed record but its own, its start (its record's unless given)."""
        if started is None:
            started = next((r.get("start") for r in records if r.get("jobset") == jobset), None)
        return cls(budget, spans_of(r for r in records if r.get("jobset") != jobset), started, step_seconds)

    def verdict(self, start_step: int | None, end_step: int | None, restarts: int, now: float,
                steps_per_hour: float | None = None) -> str | None:
        """Why the run is over its budget once the current attempt ends at `end_step` after `restarts` in-cluster
        restarts, else None. `steps_per_hour`: the rate the run reported (its step time, for the goodput rule)."""
        spans = (*self.earlier, Span(start_step, end_step, 1 + max(0, int(restarts)), self.started, now))
        step_seconds = 3600.0 / steps_per_hour if steps_per_hour else self.step_seconds
        return per_interruption(spans, self.budget) or goodput(spans, self.budget, now, step_seconds)


def spans_of(records: Iterable[Mapping[str, Any]]) -> tuple[Span, ...]:
    """The closed attempt records (core.attempt.attempt_records.AttemptRecord.to_dict), oldest first, as spans: each
    starts from the step the one before it ended at (the next attempt resumes from there: core.attempt.launch)."""
    closed: dict[int, Mapping[str, Any]] = {}
    for record in records:
        if isinstance(record.get("attempt"), int) and record.get("end") is not None:
            closed[record["attempt"]] = record
    spans, before = [], None
    for number in sorted(closed):
        record = closed[number]
        end_step = record.get("last_step") if isinstance(record.get("last_step"), int) else None
        own_end = 0 if record.get("outcome") == FINISHED else 1
        spans.append(Span(before, end_step, own_end + int(record.get("restarts") or 0), record.get("start"),
                          record.get("end")))
        before = end_step
    return tuple(spans)


def per_interruption(spans: Sequence[Span], budget: Budget) -> str | None:
    """The progress rule over the newest `budget.window` interruptions (see the module)."""
    floor = budget.min_steps_per_interruption
    if not budget.window or not floor:
        return None
    counted, oldest = 0, len(spans)
    while oldest > 0 and counted < budget.window:
        oldest -= 1
        counted += spans[oldest].interruptions
    if counted < budget.window:
        return None  # not enough interruptions yet to judge
    base, newest = _step(spans[oldest].start_step), _step(spans[-1].end_step)
    gained = newest - base
    if gained > floor * counted:
        return None
    attempts = f"attempt {oldest + 1}" if oldest == len(spans) - 1 else f"attempts {oldest + 1}-{len(spans)}"
    return (f"over budget: the last {counted} interruptions ({attempts}) gained {gained} restorable steps (from "
            f"step {base} to {newest}), not more than {floor} (min_steps_per_interruption) each; the run is "
            "interrupted about as often as it saves, so it is ended rather than restarted again")


def goodput(spans: Sequence[Span], budget: Budget, now: float, step_seconds: float | None) -> str | None:
    """The goodput rule over the last `budget.goodput_window` seconds (see the module)."""
    if not budget.min_goodput or not step_seconds:
        return None
    began = next((s.start for s in spans if s.start is not None), None)
    since = now - budget.goodput_window
    if began is None or began > since:
        return None  # the run has not lasted the window yet
    points = sorted(_points(spans), key=lambda p: p[0])
    base = max((step for at, step in points if at <= since), default=0)
    gained = max(0, _step(spans[-1].end_step) - base)
    share = gained * step_seconds / budget.goodput_window
    if share >= budget.min_goodput:
        return None
    return (f"over budget: the last {budget.goodput_window / 3600:.1f} h (goodput_window) gained {gained} restorable "
            f"steps (from step {base} to {_step(spans[-1].end_step)}) at {step_seconds:.3g} s a step: goodput "
            f"{100 * share:.1f} %, under min_goodput {100 * budget.min_goodput:.0f} %")


def derived_min_steps(checkpointing: Any) -> int | None:
    """The run's shortest restorable save period, in steps: the local tier's period when the next start restores
    from it (emergency or multi-tier mode), the replicator's backup interval in steps, the persistent period."""
    periods = [getattr(checkpointing, "checkpoint_period", None)]
    if getattr(checkpointing, "enable_emergency_checkpoint", False) or getattr(
            checkpointing, "enable_multi_tier_checkpointing", False):
        periods.append(getattr(checkpointing, "local_checkpoint_period", None))
        periods.append(getattr(checkpointing, "multi_tier_checkpointing_backup_interval_steps", None))
    if not getattr(checkpointing, "enable_checkpointing", True):
        return None
    known = [p for p in periods if isinstance(p, int) and not isinstance(p, bool) and p > 0]
    return min(known) if known else None


def _points(spans: Sequence[Span]) -> Iterable[tuple[float, int]]:
    for span in spans:
        if span.start is not None:
            yield span.start, _step(span.start_step)
        if span.end is not None:
            yield span.end, _step(span.end_step)


def _step(step: int | None) -> int:
    return 0 if step is None else int(step)
