"""The stall limit, derived from the run's cadence (pure): the one rule plan, DAG form and operator all use.

    limit = max(floor, STALL_FACTOR x the smallest gap between the signals the watch can see, in seconds)

The signals: the workload's reported steps, the MTC replicator's backups and persistent checkpoints (ramdisk saves
live inside the pods and are never measured against). A gap in seconds needs the step time: given, or reported once
the run trains (the trigger re-derives the limit then); the floor covers compilation and restore. An explicit
`stall_timeout` shorter than every visible gap is refused (every attempt would be deleted as stalled).

Once steps are reported, two more limits hold: each start's first step within FIRST_STEP_FACTOR x the attempt's
longest earlier one (at least `first_step_floor`), else a start hanging before its first step waits 3 x the
persistent gap (19 h at MaxText's defaults); and steps with nothing restorable saved for
`stall_limit(restorable_only=True)` are a stall, since no resubmission could resume from them.
docs/resubmission.md, "Stall limits derived from the run's cadence", has the worked examples.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.kind_rules import rules_for
from mtc_provider.core.measure.progress import PERSISTENT, REPLICATOR, REPORTED_EVENTS, REPORTED_LOG, RESTORABLE

SIGNAL_WORDS = {REPORTED_LOG: "the leader's step lines", REPORTED_EVENTS: "the workload's step events",
                REPLICATOR: "replicator backups", PERSISTENT: "persistent checkpoints"}
STALL_FACTOR = 3.0  # a limit of three gaps: one late save or a slow step is not a hang
# Before the first signal of each start of the pods: restore and compilation (seconds locally, minutes on GKE).
# (By the kind's rules: its workload runs as local processes, or on a cluster.)
STALL_FLOOR_S = {"processes": 120.0, "cluster": 1800.0}
FIRST_STEP_FACTOR = 3.0  # a start may take three times the slowest earlier start to its first step
FIRST_STEP_FLOOR_S = 1800.0  # the default first_step_floor: a large slice's restore plus its compilation
DERIVED = "derived"  # a stall_timeout derived from the run's cadence


@dataclass(frozen=True)
class Signal:
    """One source the stall check can see, and how often it arrives (in steps, or in seconds)."""

    source: str
    every_steps: int | None = None
    every_seconds: float | None = None
    field: str = ""  # the run description's field that sets the period (for messages)

    def seconds(self, step_seconds: float | None) -> float | None:
        if self.every_seconds is not None:
            return float(self.every_seconds)
        if self.every_steps is not None and step_seconds:
            return self.every_steps * float(step_seconds)
        return None

    def describe(self, step_seconds: float | None) -> str:
        gap = self.seconds(step_seconds)
        if self.every_seconds is not None:
            how = f"{self.field} {self.every_seconds / 60:g} min"
        elif not self.field:  # the workload's own steps
            how = f"one a step, step_seconds {_fmt(step_seconds)}"
        else:
            how = f"{self.field} {self.every_steps} x step_seconds {_fmt(step_seconds)}"
        return f"{SIGNAL_WORDS.get(self.source, self.source)} every {_fmt(gap)} s ({how})"


@dataclass(frozen=True)
class Cadence:
    """The signals of one run and its step time (when known up front). Serializable: the trigger re-derives."""

    target: str
    signals: tuple[Signal, ...]
    step_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "step_seconds": self.step_seconds, "signals": [asdict(s) for s in self.signals]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Cadence":
        return cls(data["target"], tuple(Signal(**s) for s in data.get("signals") or ()), data.get("step_seconds"))

    @property
    def floor(self) -> float:
        return STALL_FLOOR_S["processes" if rules_for(self.target).local_processes else "cluster"]

    def gap(self, step_seconds: float | None = None, restorable_only: bool = False) -> tuple[float, Signal] | None:
        """The smallest known gap (seconds) between visible signals, and its signal; None when none is known."""
        step = step_seconds or self.step_seconds
        known = [(s.seconds(step), s) for s in self.signals
                 if s.seconds(step) is not None and (not restorable_only or s.source in RESTORABLE)]
        return min(known, key=lambda pair: pair[0]) if known else None

    def stall_limit(self, step_seconds: float | None = None, restorable_only: bool = False) -> float:
        """The derived limit: STALL_FACTOR x the smallest gap, at least the floor. `restorable_only`: the
        workload's steps are not seen (pod logs off or unreadable), so only saves can show progress."""
        gap = self.gap(step_seconds, restorable_only)
        return max(self.floor, STALL_FACTOR * gap[0]) if gap else self.floor

    def save_limit(self, step_seconds: float | None = None) -> tuple[float, str] | None:
        """(seconds, why) a run that reports steps may go without restorable progress: `stall_limit` measured
        against the restorable saves only; None when their gap is unknown (no step time yet) or nothing restorable
        is saved by this run (checkpointing off)."""
        step = step_seconds or self.step_seconds
        gap = self.gap(step, restorable_only=True)
        if gap is None:
            return None
        limit = max(self.floor, STALL_FACTOR * gap[0])
        return limit, f"{STALL_FACTOR:g} x {gap[1].describe(step)}, at least {self.floor:.0f} s"


def first_step_limit(measured: list[float] | tuple[float, ...], floor: float) -> tuple[float, str]:
    """(seconds, why) a start of the pods may run without reporting a step: FIRST_STEP_FACTOR x the longest time to
    the first step of the earlier starts (`measured`, seconds from their pods running), at least `floor`."""
    floor = float(floor)
    if not measured:
        return floor, f"first_step_floor {floor:.0f} s: no earlier start of this attempt was measured"
    longest = max(measured)
    times = ", ".join(f"{m:.0f}" for m in measured[-5:])
    derived = FIRST_STEP_FACTOR * longest
    basis = (f"{FIRST_STEP_FACTOR:g} x the longest time to the first step of this attempt's earlier starts "
             f"({longest:.0f} s; measured: {times} s)")
    if derived <= floor:
        return floor, f"first_step_floor {floor:.0f} s, above {basis}"
    return derived, f"{basis}, above first_step_floor {floor:.0f} s"


def run_cadence(checkpointing: Any, target: str, reported: bool = True, step_seconds: float | None = None) -> Cadence:
    """The signals a watch of this run sees. `reported`: the workload's steps are read (pod logs on GKE and
    kubernetes, events on the local target)."""
    signals: list[Signal] = []
    if reported:
        events = rules_for(target).local_processes  # the local workload writes step events; a pod logs its steps
        signals.append(Signal(REPORTED_EVENTS if events else REPORTED_LOG, every_steps=1))
    if getattr(checkpointing, "enable_multi_tier_checkpointing", False):
        minutes = checkpointing.multi_tier_checkpointing_backup_interval_minutes
        if minutes:
            signals.append(Signal(REPLICATOR, every_seconds=60.0 * minutes,
                                  field="checkpointing.multi_tier_checkpointing_backup_interval_minutes"))
        else:
            signals.append(Signal(REPLICATOR, every_steps=checkpointing.multi_tier_checkpointing_backup_interval_steps,
                                  field="checkpointing.multi_tier_checkpointing_backup_interval_steps"))
    elif getattr(checkpointing, "enable_checkpointing", True):
        signals.append(Signal(PERSISTENT, every_steps=checkpointing.checkpoint_period,
                              field="checkpointing.checkpoint_period"))
    return Cadence(target, tuple(signals), step_seconds)


def check_stall_timeout(value: float | None, cadence: Cadence, field: str = "stall_timeout") -> list[str]:
    """Warnings for an explicit `stall_timeout`; SpecError when it is shorter than every visible signal's gap.

    Unknown gaps (no step time yet) are not judged: the trigger measures the step time once the run reports it.
    """
    if value is None:
        return []
    step = cadence.step_seconds
    alive = cadence.gap(step)
    derived = cadence.stall_limit(step)
    if alive is not None and float(value) < alive[0]:
        raise SpecError(field, value, f"at least the gap between the signals the stall check measures: "
                                      f"{alive[1].describe(step)}; or empty for the derived limit {derived:.0f} s "
                                      f"({STALL_FACTOR:g} x that gap, at least {cadence.floor:.0f} s)")
    restorable = cadence.gap(step, restorable_only=True)
    if restorable is not None and float(value) < restorable[0]:
        return [f"{field} {float(value):.0f} s is shorter than the gap between the checkpoints a resubmission "
                f"resumes from ({restorable[1].describe(step)}): it holds only while the workload's step lines are "
                f"read (pod_logs); without them every attempt would be deleted as stalled. Empty: the derived "
                f"limit {derived:.0f} s"]
    return []


def stall_rule(value: Any, checkpointing: Any, target: str, *, reported: bool, step_seconds: float | None = None,
               extra_flags: Any = None, cadence_given: dict[str, Any] | None = None
               ) -> tuple[float | None, dict[str, Any] | None, list[str]]:
    """A run's stall limit, composed here once for the plan (core.definition.description.run), the launch operator's options
    (core.attempt.launch_options) and the trigger, which re-derives it from the cadence returned with the step time
    the run reports: (limit, the cadence to re-derive it from, warnings).

    `value`: None or "" (no stall detection), "derived", or seconds, checked against the signals the watch sees
    (`check_stall_timeout`); `reported`: the workload's steps are read; `cadence_given`: a plan's cadence, kept
    with its limit."""
    if value in (None, ""):
        return None, cadence_given, []
    cadence = run_cadence(checkpointing, target, reported=reported,
                          step_seconds=step_seconds_of(target, step_seconds, extra_flags))
    if value == "derived":
        return cadence.stall_limit(), cadence.to_dict(), []
    try:
        number = float(value) if not isinstance(value, bool) else -1.0
    except (TypeError, ValueError):
        number = -1.0
    if not number > 0:
        raise SpecError("stall_timeout", value, 'a positive number of seconds, "derived", or None')
    if cadence_given:
        return number, cadence_given, []  # the plan's derived limit (checked when planned; the trigger re-derives)
    return number, None, check_stall_timeout(value, cadence)  # errors name the value as given


def step_seconds_of(target: str, step_seconds: float | None, extra_flags: Any) -> float | None:
    """The step time known up front: the description's `step_seconds`, else the local workload's `step_time_ms`."""
    if step_seconds:
        return float(step_seconds)
    if isinstance(extra_flags, dict) and rules_for(target).local_processes:
        ms = extra_flags.get("step_time_ms")
        if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0:
            return ms / 1000.0
    return None


def _fmt(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"
