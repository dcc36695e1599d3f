"""A run's ledger (pure): one typed record of what happened over the whole run, fact by fact.

Every start of the pods (an attempt's JobSet, each in-cluster restart: the step it restored and from which tier,
when it reported its first step), the reported steps over time (with loss and step time where the workload logs
them), the saves by tier, each interruption with its kind and each decision with its reason. It is kept in the
run lock beside the attempt records (adapters.run_ledger), copied into the run's record beside its checkpoints and
pushed as the launch task's `ledger` XCom; `to_dict` is its one shape.

Two writers add facts (the trigger while the task is deferred: starts, steps, restores, saves; the attempt's end:
its interruption and decision), so `merge` is a union by each fact's identity, and idempotent: merging the same
facts again changes nothing. Everything is bounded so a week-long run fits a ConfigMap: the steps are thinned to
`MAX_STEP_POINTS` evenly spread in time (the first and newest kept), the other lists keep their newest entries.
The ledger is immutable: every method returns a new one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from mtc_provider.core.basics.errors import SpecError

VERSION = 1
MAX_STEP_POINTS = 2000
MAX_SAVES_PER_TIER = 100
MAX_STARTS = 500
MAX_INTERRUPTIONS = 500
MAX_DECISIONS = 300
MAX_REASON = 300  # characters of a decision's reason kept (the attempt record keeps it whole)

LOCAL, REPLICATOR, PERSISTENT = "local", "replicator", "persistent"
TIERS = (LOCAL, REPLICATOR, PERSISTENT)

PREEMPTION = "preemption"  # graceful, handled in the cluster (a restart that does not count towards max)
PREEMPTION_NEW_ATTEMPT = "preemption-new-attempt"  # graceful: the JobSet completed below target, a new attempt
HOST_LOSS = "host-loss"  # a failure restart in the cluster
STALL = "stall"
STARTUP_TIMEOUT = "startup-timeout"
ORCHESTRATOR_FAULT = "orchestrator-fault"
FAILURE = "failure"  # the attempt failed through its in-cluster restarts
INTERRUPTION_KINDS = (PREEMPTION, PREEMPTION_NEW_ATTEMPT, HOST_LOSS, STALL, STARTUP_TIMEOUT, ORCHESTRATOR_FAULT,
                      FAILURE)

NEXT_ATTEMPT_IN_TRY = "next-attempt-in-try"
DECISION_KINDS = ("succeed", "retry", "fail", NEXT_ATTEMPT_IN_TRY)  # core.attempt.resubmission's, and in-try


@dataclass(frozen=True)
class Start:
    """One start of the pods: restart 0 is the attempt's JobSet creation, n its n-th in-cluster restart."""

    attempt: int
    restart: int
    at: float
    first_step_at: float | None = None
    restored_step: int | None = None
    restored_tier: str | None = None
    restore_seconds: float | None = None

    @property
    def key(self) -> tuple[int, int]:
        return self.attempt, self.restart

    def combined(self, other: "Start") -> "Start":
        """Both writers' view of the same start: the earliest times, the newest restore, known fields kept."""
        restore = max((self, other), key=lambda s: (s.restored_step is not None, s.restored_step or 0,
                                                    s.restored_tier is not None, s.restore_seconds is not None))
        return replace(self, at=min(self.at, other.at), first_step_at=_least(self.first_step_at, other.first_step_at),
                       restored_step=restore.restored_step, restored_tier=restore.restored_tier,
                       restore_seconds=restore.restore_seconds)


@dataclass(frozen=True)
class StepPoint:
    """A step the workload reported at `at`, with its loss and step time when the line carries them."""

    at: float
    step: int
    loss: float | None = None
    step_seconds: float | None = None

    @property
    def key(self) -> tuple[float, int]:
        return self.at, self.step

    def to_list(self) -> list[Any]:
        return [self.at, self.step, self.loss, self.step_seconds]


@dataclass(frozen=True)
class Save:
    """A checkpoint saved at `step` in `tier`; a replicator backup is complete once every node backed it up."""

    at: float
    step: int
    tier: str
    complete: bool = True

    @property
    def key(self) -> tuple[str, int]:
        return self.tier, self.step


@dataclass(frozen=True)
class Interruption:
    """An interruption of `attempt` of a kind in INTERRUPTION_KINDS; `step`: the restorable step at that time.

    `restart`: the in-cluster restart it caused (a preemption or host loss the cluster handled), None otherwise.
    The identity: an in-cluster restart and an attempt's end happen once (two copies of one trigger that both saw
    restart 2 record one interruption), an orchestrator fault (the attempt trains on) each time it happens."""

    at: float
    attempt: int
    kind: str
    step: int | None = None
    restart: int | None = None

    @property
    def key(self) -> tuple[int, int, float]:
        if self.restart is not None:
            return self.attempt, self.restart, 0.0
        return (self.attempt, -2, self.at) if self.kind == ORCHESTRATOR_FAULT else (self.attempt, -1, 0.0)


@dataclass(frozen=True)
class DecisionEntry:
    """What was decided at the end of `attempt` (DECISION_KINDS) and why."""

    at: float
    attempt: int
    kind: str
    reason: str

    @property
    def key(self) -> tuple[int, str]:
        return self.attempt, self.kind


def _least(a: float | None, b: float | None) -> float | None:
    known = [x for x in (a, b) if x is not None]
    return min(known) if known else None


def thin_steps(points: Iterable[StepPoint], limit: int = MAX_STEP_POINTS) -> tuple[StepPoint, ...]:
    """At most `limit` points, in time order: the first and the newest, and an even spread in time between them.

    Time is cut into slots of a power of two seconds, aligned to the epoch, the smallest that fits the span into
    the limit, and each slot keeps its first point. As a run grows the slot doubles and two old slots become one,
    so thinning again and again (every flush of a week-long run) keeps the spread even instead of wearing holes;
    fewer points than the limit come back unchanged, so thinning again changes nothing."""
    ordered = sorted({p.key: p for p in points}.values(), key=lambda p: p.key)
    if len(ordered) <= limit:
        return tuple(ordered)
    span = max(ordered[-1].at - ordered[0].at, 1e-3)
    slot = 2.0 ** math.ceil(math.log2(span / max(1, limit - 2)))
    kept, taken = [], set()
    for point in ordered[:-1]:
        index = math.floor(point.at / slot)
        if index not in taken:
            taken.add(index)
            kept.append(point)
    return tuple(kept[:limit - 1] + [ordered[-1]])


def _earlier(a: Any, b: Any) -> Any:
    """The same fact seen by two writers: the earlier sighting (whichever merges first)."""
    return min(a, b, key=lambda item: (item.at, repr(item)))


def _union(old: Sequence[Any], new: Iterable[Any], combine: Callable[[Any, Any], Any]) -> list[Any]:
    """One fact per identity (`key`); a fact both sides hold is `combine`d."""
    merged = {item.key: item for item in old}
    for item in new:
        merged[item.key] = combine(merged[item.key], item) if item.key in merged else item
    return list(merged.values())


def _newest(items: Iterable[Any], limit: int) -> tuple[Any, ...]:
    return tuple(sorted(items, key=lambda item: (item.at, item.key))[-limit:])


def _bounded_saves(saves: Iterable[Save]) -> tuple[Save, ...]:
    by_tier: dict[str, list[Save]] = {}
    for save in saves:
        by_tier.setdefault(save.tier, []).append(save)
    kept = [s for tier in by_tier.values() for s in sorted(tier, key=lambda s: s.step)[-MAX_SAVES_PER_TIER:]]
    return tuple(sorted(kept, key=lambda s: (s.at, s.key)))


@dataclass(frozen=True)
class RunLedger:
    """A run's ledger (see the module). Immutable: each method returns a new ledger."""

    starts: tuple[Start, ...] = ()
    steps: tuple[StepPoint, ...] = ()
    saves: tuple[Save, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    decisions: tuple[DecisionEntry, ...] = ()

    # --- facts ----------------------------------------------------------------------------------------------
    def add_start(self, start: Start) -> "RunLedger":
        _check_start(start, "start")
        merged = _union(self.starts, [start], Start.combined)
        return replace(self, starts=_newest(merged, MAX_STARTS))

    def current_start(self, attempt: int) -> Start | None:
        """The newest start of `attempt` (its highest restart), or None."""
        of = [s for s in self.starts if s.attempt == attempt]
        return max(of, key=lambda s: s.restart) if of else None

    def first_step(self, attempt: int, restart: int, at: float) -> "RunLedger":
        """The first step of that start was reported at `at` (the earliest report counts); no start: unchanged."""
        start = next((s for s in self.starts if s.key == (attempt, restart)), None)
        if start is None or (start.first_step_at is not None and start.first_step_at <= at):
            return self
        return self.add_start(replace(start, first_step_at=at))

    def restored(self, attempt: int, at: float, step: int, tier: str | None = None,
                 seconds: float | None = None) -> "RunLedger":
        """A start of `attempt` restored `step` (from `tier`, in `seconds`) at `at`: the newest start of that attempt
        begun at or before `at` (the newest one when none is known to be that old)."""
        of = sorted((s for s in self.starts if s.attempt == attempt), key=lambda s: s.restart)
        if not of:
            return self
        start = next((s for s in reversed(of) if s.at <= at), of[0])
        return self.add_start(replace(start, restored_step=step, restored_tier=tier, restore_seconds=seconds))

    def add_steps(self, points: Iterable[StepPoint]) -> "RunLedger":
        # A diverging run logs `loss: nan`; JSON has no NaN (a browser's JSON.parse refuses it), so it is kept as null
        new = [p if p.loss is None or math.isfinite(p.loss) else replace(p, loss=None) for p in points]
        for index, point in enumerate(new):
            _check_step(point, f"steps[{index}]")
        return replace(self, steps=thin_steps([*self.steps, *new]))

    def add_save(self, save: Save) -> "RunLedger":
        _check_save(save, "save")
        return replace(self, saves=_bounded_saves(_union(self.saves, [save], _better_save)))

    def add_interruption(self, interruption: Interruption) -> "RunLedger":
        _check_interruption(interruption, "interruption")
        return replace(self, interruptions=_newest(_union(self.interruptions, [interruption], _earlier),
                                                   MAX_INTERRUPTIONS))

    def add_decision(self, decision: DecisionEntry) -> "RunLedger":
        _check_decision(decision, "decision")
        decision = replace(decision, reason=decision.reason[:MAX_REASON])
        return replace(self, decisions=_newest(_union(self.decisions, [decision], _earlier), MAX_DECISIONS))

    def merge(self, other: "RunLedger") -> "RunLedger":
        """Both writers' facts: a union by identity (the same fact twice is one), then bounded again."""
        return RunLedger(
            starts=_newest(_union(self.starts, other.starts, Start.combined), MAX_STARTS),
            steps=thin_steps([*self.steps, *other.steps]),
            saves=_bounded_saves(_union(self.saves, other.saves, _better_save)),
            interruptions=_newest(_union(self.interruptions, other.interruptions, _earlier), MAX_INTERRUPTIONS),
            decisions=_newest(_union(self.decisions, other.decisions, _earlier), MAX_DECISIONS))

    # --- the one shape ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "starts": [{"attempt": s.attempt, "restart": s.restart, "at": s.at, "first_step_at": s.first_step_at,
                        "restored_step": s.restored_step, "restored_tier": s.restored_tier,
                        "restore_seconds": s.restore_seconds} for s in sorted(self.starts, key=lambda s: s.key)],
            "steps": [p.to_list() for p in self.steps],
            "saves": [{"at": s.at, "step": s.step, "tier": s.tier, "complete": s.complete} for s in self.saves],
            "interruptions": [{"at": i.at, "attempt": i.attempt, "kind": i.kind, "step": i.step,
                               "restart": i.restart} for i in self.interruptions],
            "decisions": [{"at": d.at, "attempt": d.attempt, "kind": d.kind, "reason": d.reason}
                          for d in self.decisions],
        }

    @classmethod
    def from_dict(cls, data: Any) -> "RunLedger":
        """The ledger of `to_dict`'s shape; SpecError naming the field, its value and what is allowed otherwise.
        An empty dict (no ledger yet) is the empty ledger."""
        if not isinstance(data, Mapping):
            raise SpecError("ledger", data, "a mapping {version, starts, steps, saves, interruptions, decisions}")
        if not data:
            return cls()
        if data.get("version") != VERSION:
            raise SpecError("ledger.version", data.get("version"), f"{VERSION}")
        starts = [_start_of(item, f"ledger.starts[{i}]") for i, item in enumerate(_list(data, "starts"))]
        steps = [_step_of(item, f"ledger.steps[{i}]") for i, item in enumerate(_list(data, "steps"))]
        saves = [_save_of(item, f"ledger.saves[{i}]") for i, item in enumerate(_list(data, "saves"))]
        interruptions = [_interruption_of(item, f"ledger.interruptions[{i}]")
                         for i, item in enumerate(_list(data, "interruptions"))]
        decisions = [_decision_of(item, f"ledger.decisions[{i}]") for i, item in enumerate(_list(data, "decisions"))]
        return cls().merge(cls(starts=tuple(starts), steps=tuple(steps), saves=tuple(saves),
                               interruptions=tuple(interruptions), decisions=tuple(decisions)))


def _better_save(a: Save, b: Save) -> Save:
    """The same step of a tier seen twice: complete wins (a backup completes, it never un-completes), then the
    earliest time."""
    if a.complete != b.complete:
        return a if a.complete else b
    return a if a.at <= b.at else b


# --- checks: every field named, with its value and what is allowed ----------------------------------------------
def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise SpecError(f"ledger.{key}", value, "a list")
    return value


def _int(where: str, value: Any, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SpecError(where, value, f"an integer >= {least}")
    return value


def _opt_int(where: str, value: Any) -> int | None:
    return None if value is None else _int(where, value)


def _time(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpecError(where, value, "a time in unix seconds (a finite number >= 0)")
    return float(value)


def _opt_number(where: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(where, value, "a finite number or null")
    return float(value)


def _choice(where: str, value: Any, allowed: Sequence[str], optional: bool = False) -> Any:
    if (optional and value is None) or value in allowed:
        return value
    raise SpecError(where, value, ("null or " if optional else "") + "one of " + ", ".join(allowed))


def _fields(item: Any, where: str, keys: str) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise SpecError(where, item, f"a mapping {{{keys}}}")
    return item


def _check_start(s: Start, where: str) -> None:
    _int(f"{where}.attempt", s.attempt, 1), _int(f"{where}.restart", s.restart), _time(f"{where}.at", s.at)
    if s.first_step_at is not None:
        _time(f"{where}.first_step_at", s.first_step_at)
    _opt_int(f"{where}.restored_step", s.restored_step)
    _choice(f"{where}.restored_tier", s.restored_tier, TIERS, optional=True)
    _opt_number(f"{where}.restore_seconds", s.restore_seconds)


def _start_of(item: Any, where: str) -> Start:
    d = _fields(item, where, "attempt, restart, at, first_step_at, restored_step, restored_tier, restore_seconds")
    start = Start(attempt=d.get("attempt"), restart=d.get("restart"), at=d.get("at"),
                  first_step_at=d.get("first_step_at"), restored_step=d.get("restored_step"),
                  restored_tier=d.get("restored_tier"), restore_seconds=d.get("restore_seconds"))
    _check_start(start, where)
    return start


def _check_step(p: StepPoint, where: str) -> None:
    _time(f"{where}.at", p.at), _int(f"{where}.step", p.step)
    _opt_number(f"{where}.loss", p.loss)
    _opt_number(f"{where}.step_seconds", p.step_seconds)


def _step_of(item: Any, where: str) -> StepPoint:
    if not isinstance(item, list) or len(item) != 4:
        raise SpecError(where, item, "a list [at, step, loss or null, step_seconds or null]")
    point = StepPoint(*item)
    _check_step(point, where)
    return point


def _check_save(s: Save, where: str) -> None:
    _time(f"{where}.at", s.at), _int(f"{where}.step", s.step), _choice(f"{where}.tier", s.tier, TIERS)
    if not isinstance(s.complete, bool):
        raise SpecError(f"{where}.complete", s.complete, "true or false")


def _save_of(item: Any, where: str) -> Save:
    d = _fields(item, where, "at, step, tier, complete")
    save = Save(at=d.get("at"), step=d.get("step"), tier=d.get("tier"), complete=d.get("complete", True))
    _check_save(save, where)
    return save


def _check_interruption(i: Interruption, where: str) -> None:
    _time(f"{where}.at", i.at), _int(f"{where}.attempt", i.attempt, 1)
    _choice(f"{where}.kind", i.kind, INTERRUPTION_KINDS), _opt_int(f"{where}.step", i.step)
    _opt_int(f"{where}.restart", i.restart)


def _interruption_of(item: Any, where: str) -> Interruption:
    d = _fields(item, where, "at, attempt, kind, step, restart")
    found = Interruption(at=d.get("at"), attempt=d.get("attempt"), kind=d.get("kind"), step=d.get("step"),
                         restart=d.get("restart"))
    _check_interruption(found, where)
    return found


def _check_decision(d: DecisionEntry, where: str) -> None:
    _time(f"{where}.at", d.at), _int(f"{where}.attempt", d.attempt, 1)
    _choice(f"{where}.kind", d.kind, DECISION_KINDS)
    if not isinstance(d.reason, str):
        raise SpecError(f"{where}.reason", d.reason, "a string")


def _decision_of(item: Any, where: str) -> DecisionEntry:
    d = _fields(item, where, "at, attempt, kind, reason")
    found = DecisionEntry(at=d.get("at"), attempt=d.get("attempt"), kind=d.get("kind"), reason=d.get("reason"))
    _check_decision(found, where)
    return found


# --- the attempt's end, in the ledger's words --------------------------------------------------------------------
def end_facts(*, at: float, attempt: int, kind: str, reason: str, outcome: str, interruption: str | None,
              in_try: bool, step: int | None, cause: str | None = None) -> tuple[Interruption | None, DecisionEntry]:
    """The interruption (None for a finished attempt) and the decision of an ended attempt, from its
    core.attempt.attempt_records.AttemptEnd's fields. `cause`: an interruption kind the end's fields cannot tell
    (a stall, a start-up timeout), given by whoever saw it; otherwise a graceful end (the JobSet completed below
    target) is a preemption handled by a new attempt, and any other disrupted or failed end a failure."""
    from mtc_provider.core.attempt.interruptions import GRACEFUL
    from mtc_provider.core.attempt.outcomes import DISRUPTED, FAILED_OUTCOME

    if cause is not None:
        _choice("cause", cause, INTERRUPTION_KINDS)
    if outcome not in (DISRUPTED, FAILED_OUTCOME):
        happened = None
    else:
        happened = cause or (PREEMPTION_NEW_ATTEMPT if interruption == GRACEFUL else FAILURE)
    found = Interruption(at=at, attempt=attempt, kind=happened, step=step) if happened else None
    decided = DecisionEntry(at=at, attempt=attempt, kind=NEXT_ATTEMPT_IN_TRY if in_try else kind, reason=reason)
    return found, decided
