"""The training-run view (pure): what Airflow recorded about one DAG run, turned into what the page shows.

The Airflow plugin (plugins/run_view.py) reads the records through Airflow's own models inside the api-server
(adapters/airflow_run.py) and hands them here as plain values; nothing here knows Airflow, a client or a file.

Sources, all recorded by the provider already:
- the launch task's tries (Airflow's task instance and its history): one try is one attempt;
- its `attempts` XCom (operators/jobset.py: one record per attempt, kept in the run lock): JobSet, start, end,
  outcome, in-cluster restarts, step reached;
- its `progress` XCom (core.progress_report.ProgressReport.to_xcom): step, rate, ETA, newest checkpoint;
- the local workload's events (adapters/workload_events.py), where the api-server can see them (local target):
  every step, save and restore with its tier;
- the goodput task's return value (operators/goodput.py) once it ran.

`live_progress` is the one place that decides which figure is "the step now": the richest source wins, so
step-level progress XComs (written during the run) are picked up as soon as the trigger writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from mtc_provider.core.outcomes import DISRUPTED, FAILED_OUTCOME, FINISHED
from mtc_provider.core.progress_report import format_duration

LAUNCH_OPERATOR = "MtcJobSetOperator"
GOODPUT_OPERATOR = "GoodputReportOperator"
# The tiers a checkpoint can live in, in the order the page shows them. "replicator" is GKE MTC's replicator
# service backup (the `backup` tier of the workload's save events, when a workload records it).
TIERS = ("local", "persistent", "replicator")
TIER_TITLES = {"local": "local (ramdisk)", "persistent": "persistent (bucket)", "replicator": "MTC replicator backup"}
TIER_ALIASES = {"backup": "replicator", "replicator": "replicator", "local": "local", "persistent": "persistent"}


@dataclass(frozen=True)
class Try:
    """One Airflow try of the launch task (its task instance or one of its history rows)."""

    try_number: int
    state: str | None
    start: float | None
    end: float | None


@dataclass
class RunFacts:
    """What Airflow holds about one run, as plain values (epoch seconds for times)."""

    dag_id: str
    run_id: str
    run_state: str | None
    launch_task_id: str | None = None
    tries: list[Try] = field(default_factory=list)
    attempts: list[Mapping[str, Any]] = field(default_factory=list)  # the `attempts` XCom
    progress: Mapping[str, Any] | None = None  # the `progress` XCom
    jobset: Mapping[str, Any] | None = None  # the `jobset` XCom (result of the last closed attempt)
    trigger_extra: Mapping[str, Any] | None = None  # the deferred try's trigger `extra` (attempt, target_step...)
    checkpoint_dir: str | None = None
    target_step: int | None = None
    events: list[Mapping[str, Any]] | None = None  # None: not visible from the api-server (GKE)
    persistent_steps: list[int] | None = None  # finalized steps in a local checkpoint folder, when visible
    goodput: Mapping[str, Any] | None = None  # the goodput task's return value
    links: dict[str, str] = field(default_factory=dict)  # link name -> URL
    now: float = 0.0


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def live_progress(records: RunFacts) -> dict[str, Any]:
    """The step now, its rate and ETA, from the richest source there is.

    The workload's own step events (local target) are step-level; the `progress` XCom is what the trigger
    last reported (checkpoint-level today; step-level once the trigger writes the training step there). The
    larger step wins: a source that lags can never move the figure back.
    """
    from mtc_provider.core.progress import SOURCE_WORDS

    progress = dict(records.progress or {})
    target = records.target_step or progress.get("target_step")
    step, source = progress.get("step"), "progress XCom" if progress.get("step") is not None else None
    if source and progress.get("source") in SOURCE_WORDS:  # where the trigger's step came from (core.progress)
        source = f"progress XCom: {SOURCE_WORDS[progress['source']]}"
    rate = _num(progress.get("steps_per_hour"))
    steps = [e for e in (records.events or []) if e.get("event") == "step" and isinstance(e.get("step"), int)]
    if steps:
        last = steps[-1]
        if step is None or last["step"] > step:
            step, source = last["step"], "workload events"
        recent = [e for e in steps if float(e["ts"]) >= float(last["ts"]) - 60.0]  # the last minute's rate
        if len(recent) >= 2 and float(recent[-1]["ts"]) > float(recent[0]["ts"]):
            rate = (recent[-1]["step"] - recent[0]["step"]) * 3600.0 / (float(recent[-1]["ts"]) - float(recent[0]["ts"]))
    newest = progress.get("newest_checkpoint")
    if records.persistent_steps:
        newest = max([s for s in (newest, max(records.persistent_steps)) if s is not None])
    eta = None
    if step is not None and target:
        eta = 0.0 if step >= target else ((target - step) * 3600.0 / rate if rate else None)
    return {"step": step, "target_step": target,
            "percent": None if step is None or not target else round(100.0 * min(step, target) / target, 1),
            "steps_per_hour": None if rate is None else round(rate, 1), "eta_seconds": eta,
            "eta": format_duration(eta) if eta is not None else "?", "newest_checkpoint": newest,
            "source": source or "nothing recorded yet",
            # what a resubmission resumes from, and where it is (the trigger's one progress signal)
            "restorable_step": progress.get("restorable_step"), "restorable_source": progress.get("restorable_source")}


def _event_runs(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each start of the workload's lowest process (one per JobSet start and in-cluster restart): when, its JobSet
    and restart attempt (the workload's `start` event carries both), and the last step it reached."""
    ids = [e.get("process") for e in events if e.get("process") is not None]
    first = min(ids) if ids else None
    runs: list[dict[str, Any]] = []
    for e in events:
        if e.get("process") != first:
            continue
        if e.get("event") == "start" or not runs:
            restart = e.get("restart_attempt")
            runs.append({"start": float(e["ts"]), "jobset": e.get("jobset"), "step": None,
                         "restart": int(restart) if str(restart or "").isdigit() else None})
        if e.get("event") == "step" and isinstance(e.get("step"), int):
            runs[-1]["step"] = e["step"]
    return runs


def _runs_of(runs: list[dict[str, Any]], jobset: Any, start: float | None, end: float | None) -> list[dict[str, Any]]:
    """The workload starts of one attempt: by its JobSet's name when the events name it, else by time."""
    if jobset and any(r["jobset"] for r in runs):
        return [r for r in runs if r["jobset"] == jobset]
    return [r for r in runs if start is not None and r["start"] >= start - 5.0 and (end is None or r["start"] <= end)]


def attempts_view(records: RunFacts) -> list[dict[str, Any]]:
    """One row per try of the launch task: JobSet, start, end, outcome, in-cluster restarts, step reached."""
    by_try: dict[int, Mapping[str, Any]] = {}
    for record in records.attempts:
        if isinstance(record, Mapping) and isinstance(record.get("attempt"), int):
            by_try[record["attempt"]] = record
    runs = _event_runs(records.events or [])
    tries = {t.try_number: t for t in records.tries if t.try_number}
    rows = []
    for number in sorted(set(tries) | set(by_try)):
        t, record = tries.get(number), by_try.get(number, {})
        start = _num(record.get("start")) or (t.start if t else None)
        end = _num(record.get("end")) or (t.end if t and t.state not in ("running", "deferred", "queued") else None)
        inside = _runs_of(runs, record.get("jobset"), start, end)
        jobset = record.get("jobset") or next((r["jobset"] for r in inside if r["jobset"]), None)
        restarts = record.get("restarts") if isinstance(record.get("restarts"), int) else 0
        numbered = [r["restart"] for r in inside if r["restart"] is not None]
        seen_restarts = max(numbered) if numbered else len(inside) - 1
        restarts = max(restarts, seen_restarts)  # the JobSet's own count, or the workload's restarts so far
        step = record.get("last_step") if end is not None else None
        seen = [r["step"] for r in inside if r["step"] is not None]
        if seen:
            step = max(seen) if step is None else max(step, max(seen))
        outcome = record.get("outcome") or (None if t is None else _outcome_of(t.state))
        if not record and outcome == FAILED_OUTCOME and number < max(tries):  # Airflow tried again: a resubmission
            outcome = DISRUPTED
        rows.append({"try": number, "jobset": jobset, "start": start, "end": end,
                     "outcome": outcome or "running", "restarts": restarts, "step": step,
                     "state": t.state if t else None, "reason": record.get("reason") or ""})
    return rows


def _outcome_of(state: str | None) -> str | None:
    return {"success": FINISHED, "failed": FAILED_OUTCOME, "up_for_retry": DISRUPTED}.get(state or "")


def checkpoints_view(records: RunFacts) -> list[dict[str, Any]]:
    """Checkpoints by tier: steps saved in each, and whether the tier is visible from here at all."""
    saved: dict[str, set[int]] = {tier: set() for tier in TIERS}
    events = records.events
    for e in events or []:
        if e.get("event") == "save_end" and isinstance(e.get("step"), int):
            saved[TIER_ALIASES.get(str(e.get("tier")), "persistent")].add(e["step"])
    if records.persistent_steps:
        saved["persistent"].update(records.persistent_steps)
    newest = (records.progress or {}).get("newest_checkpoint")
    if isinstance(newest, int):
        saved["persistent"].add(newest)
    out = []
    for tier in TIERS:
        steps = sorted(saved[tier])
        if tier == "persistent":
            visible, note = True, "" if events is not None else "the newest persistent step the trigger reported"
        elif events is None:
            visible, note = False, "not visible from Airflow on this target (the pods' ramdisks and the replicator)"
        elif tier == "replicator" and not steps:
            visible, note = False, ("no replicator backups recorded (multi-tier mode only: MTC's replicator on GKE, "
                                    "the runner's on the local target)")
        else:
            visible, note = True, ""
        out.append({"tier": tier, "title": TIER_TITLES[tier], "visible": visible, "steps": steps,
                    "newest": steps[-1] if steps else None, "count": len(steps), "note": note})
    return out


def restores_view(records: RunFacts) -> list[dict[str, Any]]:
    """Each restore the workload recorded: step, tier and how long it took (the lowest process's view)."""
    events = records.events or []
    ids = [e.get("process") for e in events if e.get("process") is not None]
    first = min(ids) if ids else None
    return [{"step": e.get("step"), "tier": TIER_ALIASES.get(str(e.get("tier")), str(e.get("tier"))),
             "at": float(e["ts"]), "duration_s": _num(e.get("duration_s"))}
            for e in events if e.get("event") == "restore" and e.get("process") == first]


def goodput_view(records: RunFacts) -> dict[str, Any] | None:
    """The goodput task's report once it ran; before that, the same computation over the events so far."""
    if records.goodput and isinstance(records.goodput.get("goodput"), (int, float)):
        return {**{k: records.goodput.get(k) for k in ("goodput", "productive_s", "elapsed_s", "badput_s",
                                                        "recovery_s", "disruptions", "last_productive_step")},
                "source": f"goodput task ({records.goodput.get('source') or 'report'})", "final": True}
    if not records.events:
        return None
    from mtc_provider.core.goodput import compute_goodput, timeline_from_workload_events

    report = compute_goodput(timeline_from_workload_events(records.events)).to_payload()
    return {**{k: report[k] for k in ("goodput", "productive_s", "elapsed_s", "badput_s", "recovery_s",
                                      "disruptions", "last_productive_step")},
            "source": "so far, from the workload events", "final": False}


def interruption_counts(attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    from mtc_provider.core.interruptions import count, summary

    counts = count(attempts)
    return {**counts, "summary": summary(counts)}


def run_view(records: RunFacts) -> dict[str, Any]:
    """The JSON the page polls."""
    return {
        "dag_id": records.dag_id, "run_id": records.run_id, "run_state": records.run_state,
        "launch_task_id": records.launch_task_id, "checkpoint_dir": records.checkpoint_dir,
        "live": live_progress(records),
        "attempts": attempts_view(records),
        # how many interruptions of each kind the run survived (core.interruptions, from the attempt records)
        "interruptions": interruption_counts(records.attempts),
        "checkpoints": checkpoints_view(records),
        "restores": restores_view(records),
        "goodput": goodput_view(records),
        "links": [{"name": name, "url": url} for name, url in sorted(records.links.items()) if url],
        "running": records.run_state in ("queued", "running"),
        "now": records.now,
    }
