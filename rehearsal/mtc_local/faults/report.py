"""What each injected fault cost (pure): steps lost, the tier restored from, restore and recovery time.

Inputs are plain dicts: the runner's fault records (`ts`, `kind`, `slice`, `host`) and the workload's
events (`ts`, `event`, `step`, `tier`, `duration_s`). A fault's cost is read off the events around it: the
last step completed before it, the first restore after it, and the first new step after that restore.
Every process of a start writes its own `restore`: `run_restores` counts them once per start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class FaultOutcome:
    kind: str
    target: str  # "slice 0 host 1" / "slice 1"
    ts: float
    last_step: int | None  # the newest step any process completed before the fault
    restored_step: int | None  # the step the next start restored (0: started over)
    tier: str | None  # local | persistent | None (nothing to restore)
    restore_s: float | None
    recovery_s: float | None  # fault to the first newly completed step
    steps_lost: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _target(fault: Mapping[str, Any]) -> str:
    host = fault.get("host")
    if fault.get("slice") is None:  # a bucket fault (listing_outage) hits no slice
        return "the bucket"
    return f"slice {fault.get('slice')}" + (f" host {host}" if host is not None else "")


def fault_outcomes(faults: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]) -> list[FaultOutcome]:
    events = sorted(events, key=lambda e: e["ts"])
    steps = [e for e in events if e.get("event") == "step"]
    outcomes = []
    for fault in sorted(faults, key=lambda f: f["ts"]):
        ts = float(fault["ts"])
        before = [e["step"] for e in steps if e["ts"] <= ts]
        last_step = max(before) if before else None
        # The next start after the fault, then the restore of that start (before any later start), if any.
        start = next((e for e in events if e.get("event") == "start" and e["ts"] > ts), None)
        if start is None:  # an event stream without start events: take the first restore after the fault
            restore = next((e for e in events if e.get("event") == "restore" and e["ts"] > ts), None)
        else:
            later = next((e["ts"] for e in events if e.get("event") == "start" and e["ts"] > start["ts"]
                          and e.get("process") == start.get("process")), float("inf"))
            restore = next((e for e in events if e.get("event") == "restore" and start["ts"] <= e["ts"] < later),
                           None)
        if restore is not None:
            restored, tier, restore_s, resumed_at = restore["step"], restore.get("tier"), restore.get("duration_s"), restore["ts"]
        elif start is not None:
            restored, tier, restore_s, resumed_at = 0, None, None, start["ts"]
        else:
            restored, tier, restore_s, resumed_at = None, None, None, None
        first_new = next((e for e in steps if resumed_at is not None and e["ts"] > resumed_at), None)
        lost = None if last_step is None or restored is None else max(0, last_step - restored)
        outcomes.append(
            FaultOutcome(
                kind=str(fault.get("kind")),
                target=_target(fault),
                ts=ts,
                last_step=last_step,
                restored_step=restored,
                tier=tier,
                restore_s=restore_s,
                recovery_s=None if first_new is None else first_new["ts"] - ts,
                steps_lost=lost,
            )
        )
    return outcomes


@dataclass(frozen=True)
class RunRestore:
    """One restore of the run: the step a start of the job restored, and the tier(s) its processes read it from."""

    ts: float  # the first process's restore
    step: int
    tiers: tuple[str, ...]

    def describe(self) -> str:
        return f"step {self.step} ({'/'.join(self.tiers) or '?'})"


def run_restores(events: Iterable[Mapping[str, Any]]) -> list[RunRestore]:
    """The run's restores, one per start of the job however many processes restored in it. A process restores at
    most once per start, so one that restores again begins the next start's restore (events without `process`,
    written by one process, are one restore each)."""
    restores: list[RunRestore] = []
    seen: set[Any] = set()
    for event in sorted((e for e in events if e.get("event") == "restore"), key=lambda e: e["ts"]):
        process, tier = event.get("process"), event.get("tier")
        if not restores or process is None or process in seen:
            restores.append(RunRestore(float(event["ts"]), int(event["step"]), ()))
            seen = set()
        seen.add(process)
        last = restores[-1]
        if tier and tier not in last.tiers:
            restores[-1] = RunRestore(last.ts, last.step, (*last.tiers, str(tier)))
    return restores
