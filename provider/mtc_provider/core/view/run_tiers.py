"""What the run view shows of a run's checkpoints and interruptions (pure): checkpoints by tier, restores, and
interruptions by kind, from the run ledger (core.attempt.ledger.RunLedger) when the run has one, the
local workload's events, and the XComs the trigger and the operator push (core.view.run_page.RunFacts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from mtc_provider.core.attempt.ledger import RunLedger, Start

if TYPE_CHECKING:
    from mtc_provider.core.view.run_page import RunFacts

# The tiers a checkpoint can live in, in the order the page shows them. "replicator" is GKE MTC's replicator
# service backup (the `backup` tier of the workload's save events, when a workload records it).
TIERS = ("local", "persistent", "replicator")
TIER_TITLES = {"local": "local (ramdisk)", "persistent": "persistent (bucket)", "replicator": "MTC replicator backup"}
TIER_ALIASES = {"backup": "replicator", "replicator": "replicator", "local": "local", "persistent": "persistent"}


def as_number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_ledger(records: RunFacts) -> tuple[RunLedger | None, str | None]:
    """(the run's ledger, None), (None, why it was not read) for a ledger this version cannot read, or (None, None)
    without one."""
    if not records.ledger:
        return None, None
    try:
        return RunLedger.from_dict(records.ledger), None
    except ValueError as exc:  # SpecError, naming the field
        return None, str(exc)


def ledger_starts(records: RunFacts) -> list[Start]:
    """The ledger's starts (each JobSet start and in-cluster restart) by time, or [] without a readable ledger."""
    ledger, _ = read_ledger(records)
    return sorted(ledger.starts, key=lambda s: (s.at, s.key)) if ledger else []


SHOWN_STEPS = 30  # the steps a tier's row lists (the newest); its count covers them all


def checkpoints_view(records: RunFacts) -> list[dict[str, Any]]:
    """Checkpoints by tier, each from what saw it: the workload's save events (local target), the ledger's saves
    (complete or not) and the steps its starts restored; persistent also from the run's finalized step folders
    (local target) and the trigger's newest checkpoint unless it says that is a replicator backup; replicator
    also from the trigger's restorable step when it is a backup."""
    from mtc_provider.core.measure.progress import PERSISTENT, REPLICATOR

    saved: dict[str, set[int]] = {tier: set() for tier in TIERS}
    incomplete: dict[str, set[int]] = {tier: set() for tier in TIERS}
    events = records.events
    for e in events or []:
        if e.get("event") == "save_end" and isinstance(e.get("step"), int):
            saved[TIER_ALIASES.get(str(e.get("tier")), "persistent")].add(e["step"])
    ledger, _ = read_ledger(records)
    ledger_saves = ledger.saves if ledger else ()
    for save in ledger_saves:
        (saved if save.complete else incomplete)[save.tier].add(save.step)
    for start in ledger_starts(records):
        if start.restored_tier and start.restored_step is not None:
            saved[start.restored_tier].add(start.restored_step)  # it existed: a start restored it
    if records.persistent_steps:
        saved["persistent"].update(records.persistent_steps)
    progress = records.progress or {}
    backup = progress.get("restorable_source") == REPLICATOR
    if as_int(progress.get("newest_checkpoint")) is not None and not backup:
        saved["persistent"].add(progress["newest_checkpoint"])
    restorable = as_int(progress.get("restorable_step"))
    if restorable is not None and backup:
        saved["replicator"].add(restorable)
    elif restorable is not None and progress.get("restorable_source") == PERSISTENT:
        saved["persistent"].add(restorable)
    for tier in TIERS:
        incomplete[tier] -= saved[tier]
    has_ledger = bool(ledger_saves) or bool(ledger_starts(records))
    out = []
    for tier in TIERS:
        steps = sorted(saved[tier])
        partial = sorted(incomplete[tier])
        note = ""
        visible = True
        if tier == "persistent":
            if events is None and not has_ledger:
                note = ("the newest persistent step the trigger reported" if steps
                        else "no finalized persistent checkpoint reported yet")
        elif events is None and not has_ledger and not steps:
            visible = False
            note = ("not visible from Airflow on this target (the pods' ramdisks)" if tier == "local"
                    else "no replicator backup reported by the trigger (multi-tier mode only)")
        elif tier == "replicator" and not steps and not partial:
            visible, note = False, ("no replicator backups recorded (multi-tier mode only: MTC's replicator on GKE, "
                                    "the runner's on the local target)")
        if partial:
            shown = ", ".join(map(str, partial[-5:]))
            note = (note + "; " if note else "") + f"incomplete (not on every node yet): {shown}"
        out.append({"tier": tier, "title": TIER_TITLES[tier], "visible": visible, "steps": steps[-SHOWN_STEPS:],
                    "newest": steps[-1] if steps else None, "count": len(steps), "incomplete": partial, "note": note})
    return out


def restores_view(records: RunFacts) -> list[dict[str, Any]]:
    """Each restore: from the ledger's starts (step, tier, duration) when the run has a ledger; else the
    workload's restore events (the lowest process's view); else, on a cluster, the restores the watched leader
    logged (MaxText's line names the step, not the tier)."""
    starts = ledger_starts(records)
    if starts:
        return [{"step": s.restored_step, "tier": s.restored_tier or "not recorded", "at": s.first_step_at or s.at,
                 "duration_s": s.restore_seconds, "attempt": s.attempt, "restart": s.restart}
                for s in starts if s.restored_step is not None]
    if not records.events and (records.cluster or {}).get("restores"):
        return [{"step": r["step"], "tier": "not in MaxText's log line", "at": float(r["at"]), "duration_s": None}
                for r in records.cluster["restores"]]
    events = records.events or []
    ids = [e.get("process") for e in events if e.get("process") is not None]
    first = min(ids) if ids else None
    return [{"step": e.get("step"), "tier": TIER_ALIASES.get(str(e.get("tier")), str(e.get("tier"))),
             "at": float(e["ts"]), "duration_s": as_number(e.get("duration_s"))}
            for e in events if e.get("event") == "restore" and e.get("process") == first]


# The ledger's interruption kinds, in words (graceful preemptions apart from failures, in the cluster or not)
INTERRUPTION_WORDS = {
    "preemption": "graceful preemptions handled in the cluster", "preemption-new-attempt":
    "graceful preemptions that took a new attempt", "host-loss": "host losses", "stall": "stalls",
    "startup-timeout": "start-up timeouts", "orchestrator-fault": "orchestrator faults", "failure": "failures"}


def interruption_counts(records: RunFacts, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How many interruptions of each kind the run survived: by the ledger's kinds when the run has one, else from
    the attempt records (core.attempt.interruptions), with the live attempt's in-cluster restarts counted now
    (their cause is not recorded without the ledger)."""
    from mtc_provider.core.attempt.interruptions import count, summary

    counts = count(records.attempts)
    counts["restarts"] = sum(r["restarts"] for r in rows)
    ledger, _ = read_ledger(records)
    ledger_kinds: dict[str, int] = {}
    for item in ledger.interruptions if ledger else ():
        ledger_kinds[item.kind] = ledger_kinds.get(item.kind, 0) + 1
    if not ledger_kinds:
        line = summary(counts).replace("in-cluster restarts", "in-cluster restarts (cause not recorded)")
        return {**counts, "by_kind": None, "summary": line}
    words = [f"{INTERRUPTION_WORDS.get(kind, kind)}: {n}" for kind, n in sorted(ledger_kinds.items())]
    return {**counts, "by_kind": ledger_kinds,
            "summary": f"interruptions survived: {', '.join(words)}; {counts['restarts']} in-cluster restarts in all; "
                       f"{counts['in_try']} attempts followed in the same try (no Airflow retry spent)"}
