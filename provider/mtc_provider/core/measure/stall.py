"""When one attempt counts as stalled (pure): the trigger feeds it what it saw; it says why, if it stalled.

Three rules: progress of any source (`ProgressSignal.alive`) within `limit()`, derived again from the run's cadence
unless given; once the workload reported a step, each start of the pods reports its first step within
`first_step_limit()`, and restorable progress advances within `save_limit()`. The clocks run only while the pods
run (waiting for capacity or an image is no hang) and restart with the watch: a triggerer restart can delay a
verdict but never invent one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mtc_provider.core.measure.cadence import STALL_FACTOR, Cadence, first_step_limit
from mtc_provider.core.measure.progress import (PERSISTENT, REPLICATOR, REPORTED, FirstSteps, ProgressSignal,
                                                RestorableClock)


def _at_least(given: float, found: tuple[float, str]) -> tuple[float, str]:
    return found if found[0] >= given else (given, f"stall_timeout {given:.0f}s, above {found[1]}")


@dataclass
class StallWatch:
    """The stall clocks of one attempt's watch: `stall_timeout`, the least limit (the limit when `cadence`, the
    run's Cadence.to_dict, is None); `first_step_floor`, the least first-step limit of a start of the pods."""

    stall_timeout: float | None
    cadence: dict[str, Any] | None = None
    first_step_floor: float = 0.0
    signal: ProgressSignal | None = None  # every source's progress since the pods ran
    first_steps: FirstSteps = field(default_factory=FirstSteps)  # each start's time to its first reported step
    saves: RestorableClock | None = None  # when restorable progress last advanced
    not_running_since: float | None = None  # the pods were not running since (the saves' clock pauses)

    def not_running(self, now: float) -> None:
        """The pods wait (pending, restarting): the clock starts again; saves already seen stay seen."""
        seen = self.signal.newest if self.signal else {}
        self.signal = ProgressSignal(started_at=now, newest={k: v for k, v in seen.items()
                                                             if k in (PERSISTENT, REPLICATOR)})
        self.not_running_since = now if self.not_running_since is None else self.not_running_since

    def running(self, now: float) -> None:
        self.first_steps.running(now)
        if self.saves is None:
            self.saves = RestorableClock(started_at=now)
        elif self.not_running_since is not None:  # pods waiting to run (capacity, a restart) save nothing
            self.saves.pause(now - self.not_running_since)
        self.not_running_since = None

    def pause(self, seconds: float) -> None:
        """Time no listing answered is taken off the clocks: a failed listing is not "no progress"."""
        self.signal.pause(seconds)
        self.saves.pause(seconds)

    def verdict(self, now: float, where: str, checkpoint_dir: str, logs_readable: bool = True) -> str | None:
        """Why the attempt stalled, or None. `logs_readable`: the workload's steps can be read now."""
        signal = self.signal
        limit, why = self.limit()
        if signal.stalled(now, limit):
            alive, restorable = signal.alive, signal.restorable
            return (f"stalled: no new finalized checkpoint nor any other progress in {checkpoint_dir} for "
                    f"{signal.seconds_without_progress(now):.0f}s (stall limit {limit:.0f}s: {why}; newest: "
                    f"{alive.words() if alive else 'none seen'}; newest finalized step "
                    f"{restorable.step if restorable else None})")
        # the rules that need the workload's steps: a derived limit, a step reported in this attempt, logs readable
        if not (self.cadence and self.first_steps.ever_stepped and logs_readable):
            return None
        waiting = self.first_steps.waiting(now)
        limit, why = self.first_step_limit()
        if waiting is not None and waiting > limit:
            saved = self.saves.step if self.saves is not None else None
            return (f"stalled: this start of the pods of {where} has run {waiting:.0f}s without reporting a step, "
                    f"although this attempt's workload reports its steps (first-step limit {limit:.0f}s: {why}; "
                    f"newest restorable step {saved})")
        found = self.save_limit() if self.saves is not None else None
        if found is None or not self.saves.stalled(now, found[0]):
            return None
        saves = self.saves
        newest = f"step {saves.step} ({saves.how})" if saves.step is not None else "none"
        return (f"stalled: steps are reported (newest: {signal.alive.words() if signal.alive else None}) but nothing "
                f"restorable was saved for {saves.seconds_without_progress(now):.0f}s (limit {found[0]:.0f}s: "
                f"{found[1]}; newest restorable: {newest})")

    def first_step_limit(self) -> tuple[float, str]:
        """(seconds, why) the current start of the pods may run before its first reported step: from the earlier
        starts of this attempt (core.measure.cadence.first_step_limit), at least `stall_timeout`."""
        return _at_least(float(self.stall_timeout), first_step_limit(self.first_steps.measured, self.first_step_floor))

    def save_limit(self) -> tuple[float, str] | None:
        """(seconds, why) the run may report steps without restorable progress: 3 x the restorable save gap at the
        step time seen (core.measure.cadence.Cadence.save_limit), at least `stall_timeout`; None when unknown."""
        found = Cadence.from_dict(self.cadence).save_limit(self.signal.step_seconds() if self.signal else None)
        return None if found is None else _at_least(float(self.stall_timeout), found)

    def limit(self) -> tuple[float, str]:
        """(seconds, why): `stall_timeout` as given, or derived again from the cadence and the step time seen.

        Until a reported step was seen in this start of the pods (pod logs off or unreadable), only saves can show
        progress, so the limit is measured against them (core.measure.cadence).
        """
        given = float(self.stall_timeout)
        if not self.cadence:
            return given, "stall_timeout"
        cadence, signal = Cadence.from_dict(self.cadence), self.signal
        reported = signal is not None and any(source in signal.newest for source in REPORTED)
        step = (signal.step_seconds() if signal is not None else None) or cadence.step_seconds
        gap = cadence.gap(step, restorable_only=not reported)
        basis = f"{STALL_FACTOR:g} x {gap[1].describe(step)}" if gap else "no gap known yet"
        return max(given, cadence.stall_limit(step, restorable_only=not reported)), \
            f"derived, at least {given:.0f}s; {basis}"
