"""The trigger's side of the run's ledger (core.attempt.ledger): what it observes while the task is deferred.

The trigger is the one writer of these facts: the starts of the pods (a restart not counted towards `maxRestarts` is
a graceful preemption, one counted a host loss), restores, reported steps, local saves and the saves its listings
find; the attempt's end adds its own (adapters.attempt_journal). They are merged into the run lock's ledger
(adapters.run_ledger) off the loop, at most every flush interval and once at the watch's end; a failing write is
tried again at the next flush. The merge is idempotent, so two live copies of one trigger may both write.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable, Mapping

from mtc_provider.core.attempt.ledger import (HOST_LOSS, LOCAL, PERSISTENT, PREEMPTION, REPLICATOR, TIERS,
                                              Interruption, RunLedger, Save, Start, StepPoint)
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.measure.step_log import log_timestamp, parse_restore, parse_saved_tiers, parse_step_line
from mtc_provider.triggers.attempt_end import run_lock

DEFAULT_FLUSH_S = 60.0

log = logging.getLogger(__name__)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class LedgerWriter:
    """The facts one watch of attempt `attempt` sees, from in-cluster restart `restart` on (its first start)."""

    def __init__(self, attempt: int, restart: int, now: float, flush_s: float | None = None) -> None:
        self.attempt, self.restart = int(attempt), int(restart)
        self.flush_s = float(flush_s or DEFAULT_FLUSH_S)
        self.ledger = RunLedger().add_start(Start(self.attempt, self.restart, round(now, 3)))
        self.restorable: int | None = None  # the newest step the next start could resume from, as seen
        self._uncounted: int | None = None  # restarts that did not count towards maxRestarts, as last seen
        self._flushed_at = float("-inf")
        self._dirty = True
        self._failing = False
        self._lock: Any = None

    # --- facts -----------------------------------------------------------------------------------------------
    def _add(self, change) -> None:
        """Apply `change` to the ledger; a fact seen again (the newest event is read at every tick) changes nothing
        and makes no write."""
        try:
            changed = change(self.ledger)
        except SpecError as exc:  # a fact the ledger refuses is left out; the watch goes on
            log.info("run ledger: a fact was left out: %s", exc)
            return
        if changed != self.ledger:
            self.ledger, self._dirty = changed, True

    def jobset(self, restarts: int, counted: int, now: float) -> None:
        """The JobSet's `status.restarts` and `restartsCountTowardsMax`: each new restart is a new start of the pods,
        and the interruption that caused it (not counted towards max: a graceful preemption; else a host loss)."""
        uncounted = max(0, restarts - counted)
        new_uncounted = 0 if self._uncounted is None else max(0, uncounted - self._uncounted)
        self._uncounted = uncounted
        for restart in range(self.restart + 1, restarts + 1):
            kind = PREEMPTION if new_uncounted > 0 else HOST_LOSS
            new_uncounted -= 1
            at = round(now, 3)
            self._add(lambda ledger, r=restart, k=kind, t=at: ledger.add_start(Start(self.attempt, r, t))
                      .add_interruption(Interruption(t, self.attempt, k, self.restorable, restart=r)))
        self.restart = max(self.restart, restarts)

    def steps(self, points: Iterable[StepPoint]) -> None:
        """Reported steps; the first one at or after the current start's time is its first step."""
        points = list(points)
        if not points:
            return
        self._add(lambda ledger: ledger.add_steps(points))
        start = self.ledger.current_start(self.attempt)
        if start is not None and start.first_step_at is None:
            after = [p.at for p in points if p.at >= start.at]
            if after:
                self._add(lambda ledger: ledger.first_step(self.attempt, start.restart, min(after)))

    def restored(self, step: int, tier: str | None, seconds: float | None, at: float) -> None:
        tier = tier if tier in TIERS else None
        self._add(lambda ledger: ledger.restored(self.attempt, round(at, 3), int(step), tier, seconds))
        self._restorable(step)

    def saved(self, step: int | None, tier: str, at: float, complete: bool = True) -> None:
        if step is None or any(s.key == (tier, step) and s.complete >= complete for s in self.ledger.saves):
            return
        self._add(lambda ledger: ledger.add_save(Save(round(at, 3), int(step), tier, complete)))
        if tier in (PERSISTENT, REPLICATOR) and complete:
            self._restorable(step)

    def listed(self, newest: Any, now: float) -> None:
        """A listing's newest finalized persistent checkpoint and complete replicator backup (adapters
        .checkpoint_stores.Newest); a backup counts once every node has it, so it is complete."""
        if newest.persistent is not None:
            self.saved(newest.persistent.step, PERSISTENT, newest.persistent.commit_time or now)
        self.saved(newest.backup, REPLICATOR, now)

    def _restorable(self, step: int) -> None:
        self.restorable = step if self.restorable is None else max(self.restorable, step)

    # --- what the trigger reads ------------------------------------------------------------------------------
    def log_lines(self, stamped: Iterable[tuple[str, str]], now: float) -> None:
        """The leader's (timestamp, line) pairs: step lines, restore lines, the workload's local saves."""
        points = []
        for stamp, line in stamped:
            at = round(log_timestamp(stamp) or now, 3)
            step = parse_step_line(line)
            if step is not None:
                points.append(StepPoint(at, step.step, step.loss, step.seconds))
                continue
            restore = parse_restore(line)
            if restore is not None:
                self.restored(restore.step, restore.tier, restore.seconds, at)
                continue
            saved = parse_saved_tiers(line)
            if saved is not None and LOCAL in saved[1]:
                self.saved(saved[0], LOCAL, at)
        self.steps(points)

    def workload_event(self, event: Mapping[str, Any] | None) -> None:
        """One of the local workload's events (adapters.workload_events): a step, a restore, a local save."""
        if not event or not isinstance(event.get("step"), int) or _number(event.get("ts")) is None:
            return
        kind, at, step = event.get("event"), round(float(event["ts"]), 3), int(event["step"])
        if kind == "step":
            self.steps([StepPoint(at, step, _number(event.get("loss")), _number(event.get("seconds")))])
        elif kind == "restore":
            self.restored(step, event.get("tier"), _number(event.get("duration_s")), at)
        elif kind in ("save_end", "save_blocking") and event.get("tier") == LOCAL:
            self.saved(step, LOCAL, at)

    # --- the run lock -----------------------------------------------------------------------------------------
    async def flush(self, trigger: Any, now: float, final: bool = False) -> None:
        """Merge the facts into the run lock's ledger, off the loop: at most every flush interval, or now at the end.
        A failure is logged (once while it lasts) and the facts are written at the next flush."""
        if not self._dirty or (not final and now - self._flushed_at < self.flush_s):
            return
        self._flushed_at = now
        facts = self.ledger
        try:
            written = await asyncio.to_thread(self._write, trigger, facts)
        except Exception as exc:  # noqa: BLE001 - the ledger is for reading the run: never end the watch
            if not self._failing:
                trigger.log.warning("could not write the run's ledger (%s: %s); trying again in %.0f s",
                                    type(exc).__name__, exc, self.flush_s)
            self._failing = True
            return
        if self._failing:
            trigger.log.info("the run's ledger is written again")
        self._failing = False
        if written and self.ledger is facts:
            self._dirty = False

    def _write(self, trigger: Any, facts: RunLedger) -> bool:
        """Blocking: merge `facts` into the lock's ledger; False when there is no lock to write (no owner of the
        try that deferred, or no run name)."""
        from mtc_provider.adapters.run_ledger import add_to_ledger

        if self._lock is None:
            self._lock = run_lock(trigger)
        if self._lock is None:
            return False
        add_to_ledger(self._lock, facts)
        return True

