"""The training-run view (pure): what Airflow recorded about one DAG run, turned into what the page shows.

The Airflow plugin (plugins/run_view.py) reads the records through Airflow's own models inside the api-server
(adapters/airflow_run.py) and hands them here as plain values; nothing here knows Airflow, a client or a file.

Sources, all recorded by the provider already:
- the launch task's tries (Airflow's task instance and its history): one try is one attempt;
- its `attempts` XCom: one record per attempt (core.attempt.attempt_records.AttemptRecord, their one schema);
- its `progress` XCom (core.measure.progress_report.ProgressReport.to_xcom): step, rate, ETA, newest checkpoint;
- the local workload's events (adapters/workload_events.py), where the api-server can see them (local target):
  every step, save and restore with its tier;
- the goodput task's return value (operators/goodput.py) once it ran.

`live_progress` is the one place that decides which figure is "the step now": the richest source wins, so
step-level progress XComs (written during the run) are picked up as soon as the trigger writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from mtc_provider.core.attempt.outcomes import DISRUPTED, FAILED_OUTCOME, FINISHED
from mtc_provider.core.measure.progress_report import format_duration

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
    run_start: float | None = None  # the DAG run's start and end (Airflow's)
    run_end: float | None = None
    # While the launch task is deferred: (kubelet time, step) of the watched JobSet leader's `completed step` lines,
    # and its pods ({name, phase, leader, waiting, message}), read by the api-server now (adapters/run_cluster.py).
    log_steps: list[tuple[float, int]] | None = None
    cluster: Mapping[str, Any] | None = None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


RATE_WINDOW_S = 300.0  # the rate of reported steps: over the last five minutes of step lines or events


def reported_steps(records: RunFacts) -> tuple[list[tuple[float, int]], str | None]:
    """(time, step) the workload reported and their source: the leader's log lines read now (any cluster), else
    the local workload's step events."""
    from mtc_provider.core.measure.progress import REPORTED_EVENTS, REPORTED_LOG

    if records.log_steps:
        return sorted(records.log_steps), REPORTED_LOG
    steps = [(float(e["ts"]), e["step"]) for e in (records.events or [])
             if e.get("event") == "step" and isinstance(e.get("step"), int)]
    return steps, REPORTED_EVENTS if steps else None


def live_progress(records: RunFacts) -> dict[str, Any]:
    """The step now, its rate and ETA, from the one progress signal (core.measure.progress.ProgressSignal) fed with every
    source the api-server sees: the `progress` XCom (the trigger's last report), and the steps the workload
    reports now (the leader's log lines on any cluster, the local workload's events). The newest step of any
    source wins (a lagging XCom never moves the figure back), except that what the workload reports now replaces
    a reported step the XCom carries: after an in-cluster restore, the workload's own count is the step.
    """
    from mtc_provider.core.measure.progress import PERSISTENT, SOURCE_WORDS, SOURCES, ProgressSignal

    progress = dict(records.progress or {})
    target = records.target_step or progress.get("target_step")
    signal = ProgressSignal(started_at=records.now)
    live_source = None
    known = progress.get("source") in SOURCES
    if isinstance(progress.get("step"), int):
        source = progress["source"] if known else PERSISTENT
        signal.observe(progress["step"], source, records.now, at=_num(progress.get("updated_at")))
    xcom = signal.alive
    reported, reported_source = reported_steps(records)
    if reported:
        # What the workload reports now is its own count, also after an in-cluster restore went back: it replaces
        # a step the XCom took from the same kind of source (saves stay: they never go back).
        signal.new_start()
        signal.observe(reported[-1][1], reported_source, records.now, at=reported[-1][0])
    alive = signal.alive
    rate = _num(progress.get("steps_per_hour"))
    if reported:
        last = reported[-1]
        recent = [p for p in reported if p[0] >= last[0] - RATE_WINDOW_S]
        if len(recent) >= 2 and recent[-1][0] > recent[0][0] and recent[-1][1] > recent[0][1]:
            rate = (recent[-1][1] - recent[0][1]) * 3600.0 / (recent[-1][0] - recent[0][0])
    step = alive.step if alive else None
    if alive is not None:
        live_source = SOURCE_WORDS.get(alive.source, alive.source)
        from_xcom = xcom is not None and (alive.step, alive.source) == (xcom.step, xcom.source) and not (
            reported and alive.source == reported_source and alive.step == reported[-1][1])
        if from_xcom:
            live_source = f"progress XCom: {live_source}" if known else "progress XCom"
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
            "source": live_source or "nothing recorded yet",
            "as_of": alive.at if alive else None,
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
    """Each restore the workload recorded: step, tier and how long it took (the lowest process's view); on a
    cluster without events, the restores the watched leader logged (MaxText names the step, not the tier)."""
    if not records.events and (records.cluster or {}).get("restores"):
        return [{"step": r["step"], "tier": "not in MaxText's log line", "at": float(r["at"]), "duration_s": None}
                for r in records.cluster["restores"]]
    events = records.events or []
    ids = [e.get("process") for e in events if e.get("process") is not None]
    first = min(ids) if ids else None
    return [{"step": e.get("step"), "tier": TIER_ALIASES.get(str(e.get("tier")), str(e.get("tier"))),
             "at": float(e["ts"]), "duration_s": _num(e.get("duration_s"))}
            for e in events if e.get("event") == "restore" and e.get("process") == first]


GOODPUT_KEYS = ("goodput", "productive_s", "elapsed_s", "badput_s", "recovery_s", "disruptions",
                "last_productive_step")


def run_timeline(records: RunFacts):
    """(Timeline, source) of the run as the api-server sees it; None before anything was recorded.

    The workload's events when visible (local target: every step, save with its tier, restore); else the attempts
    with each step known at a known time (any cluster: the step each ended attempt reached at its end, the
    progress XCom's step at its time, the leader's newest `completed step` line): coarse points, as the goodput
    task's commit times are on GKE (core.view.goodput.timeline_from_checkpoints).
    """
    from mtc_provider.core.view.goodput import Attempt, timeline_from_checkpoints, timeline_from_workload_events

    if records.events:
        return timeline_from_workload_events(records.events), "the workload events"
    rows = attempts_view(records)
    live = is_live(records)
    attempts = []
    for row in rows:
        if not row["start"]:
            continue
        end = row["end"] or (records.now if live else records.run_end or row["start"])
        outcome = row["outcome"] if row["outcome"] in (FINISHED, FAILED_OUTCOME) else DISRUPTED
        if live and not row["end"]:
            outcome = "running"  # the attempt going on: no fault drawn at "now" (its outcome counts nowhere else)
        attempts.append(Attempt(row["start"], end, outcome))
    if not attempts:
        return None
    points = [(row["step"], row["end"]) for row in rows if isinstance(row["step"], int) and row["end"]]
    progress = records.progress or {}
    if isinstance(progress.get("step"), int) and _num(progress.get("updated_at")):
        points.append((progress["step"], float(progress["updated_at"])))
    if records.log_steps:
        at, step = max(records.log_steps)
        points.append((step, at))
    return timeline_from_checkpoints(attempts, points), "the attempts and their progress (coarse)"


def goodput_view(records: RunFacts) -> dict[str, Any] | None:
    """The goodput task's report once it ran; before that, the same computation over what was recorded so far,
    on every target. MaxText's own figures (ml-goodput-measurement, read by the goodput task) beside ours."""
    if records.goodput and isinstance(records.goodput.get("goodput"), (int, float)):
        library = records.goodput.get("library")
        return {**{k: records.goodput.get(k) for k in GOODPUT_KEYS},
                "source": f"goodput task ({records.goodput.get('source') or 'report'})", "final": True,
                "library": library if isinstance(library, Mapping) else None}
    found = run_timeline(records)
    if found is None:
        return None
    from mtc_provider.core.view.goodput import compute_goodput

    timeline, source = found
    report = compute_goodput(timeline).to_payload()
    return {**{k: report[k] for k in GOODPUT_KEYS}, "source": f"so far, from {source}", "final": False,
            "library": None}


def chart_title(goodput: Mapping[str, Any], span: Mapping[str, Any]) -> str:
    """The chart's title: the summary's goodput over the summary's wall time, and the span it covers."""
    start, end = span.get("start"), span.get("end")
    when = f" ({_utc(start)} - {_utc(end)})" if start and end else ""
    return (f"goodput {100 * (goodput.get('goodput') or 0):.1f}% over "
            f"{format_duration(goodput.get('elapsed_s'))}{when}")


ACTIVE_TRY_STATES = ("running", "deferred")
QUEUED_TRY_STATES = (None, "", "none", "scheduled", "queued")


def _utc(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S UTC")


def waiting_for(records: RunFacts, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """What a running run waits for between attempts, in words; None while it trains or once it ended.

    From Airflow's state of the launch task's newest try (a retry delay, a worker slot), then from the watched
    JobSet's pods (capacity: a pod `Unschedulable`; an image pull: `ErrImagePull`/`ImagePullBackOff`; containers
    being created), then from the attempt record (a try with no JobSet submitted yet).
    """
    if not is_live(records) or not records.tries:
        return None
    last = records.tries[-1]
    number = last.try_number
    if last.state == "up_for_retry":
        ended = f" (try {number} ended {_utc(last.end)})" if last.end else ""
        return f"Airflow's retry delay before try {number + 1}{ended}"
    if last.state in QUEUED_TRY_STATES:
        return f"a worker to start try {number} (the launch task is {last.state or 'not scheduled yet'})"
    if last.state not in ACTIVE_TRY_STATES:
        return None
    pods = list((records.cluster or {}).get("pods") or [])
    for pod in pods:
        if pod.get("waiting") == "Unschedulable":
            return f"capacity: pod {pod['name']} is unschedulable ({pod.get('message') or 'no message'})"
    for pod in pods:
        if pod.get("waiting") in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            return f"the image pull: pod {pod['name']} {pod['waiting']} ({pod.get('message') or 'no message'})"
    if pods and all(p.get("phase") == "Pending" for p in pods):
        return f"the JobSet's {len(pods)} pods to start ({pods[0].get('waiting') or 'Pending'})"
    row = next((r for r in rows if r["try"] == number), None)
    if row is not None and not row.get("jobset"):
        return f"the JobSet of try {number} to be submitted"
    return None


def is_live(records: RunFacts) -> bool:
    """The page keeps refreshing: the run goes on and it has a launch task (an unrelated run is never polled)."""
    return records.launch_task_id is not None and records.run_state in ("queued", "running")


def timeline_view(records: RunFacts, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The attempts' bars as shares of the span: the run so far while it goes on (to now), else first start to
    last end, the span the goodput summary's wall time measures."""
    starts = [r["start"] for r in rows if r.get("start")]
    if not starts:
        return {"start": None, "end": None, "bars": []}
    begin = min(starts)
    ends = [r["end"] for r in rows if r.get("end")]
    live = is_live(records)
    finish = records.now if live else max(ends) if ends else max(records.run_end or begin, begin)
    span = max(1e-9, finish - begin)
    bars = []
    for r in rows:
        if not r.get("start"):
            continue
        stop = r.get("end") or finish
        bars.append({"try": r["try"], "outcome": r["outcome"], "left": round(100 * (r["start"] - begin) / span, 3),
                     "width": round(max(0.5, 100 * (stop - r["start"]) / span), 3)})
    return {"start": begin, "end": finish, "bars": bars}


def interruption_counts(attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    from mtc_provider.core.attempt.interruptions import count, summary

    counts = count(attempts)
    return {**counts, "summary": summary(counts)}


def run_view(records: RunFacts) -> dict[str, Any]:
    """The JSON the page polls."""
    rows = attempts_view(records)
    live = live_progress(records)
    waiting = waiting_for(records, rows)
    if waiting:  # no frozen ETA, no "running" try without a JobSet
        live = {**live, "eta": "waiting", "eta_seconds": None}
        for row in rows:
            if row["outcome"] == "running" and row["try"] == records.tries[-1].try_number:
                row["outcome"] = "waiting"
    return {
        "dag_id": records.dag_id, "run_id": records.run_id, "run_state": records.run_state,
        "launch_task_id": records.launch_task_id, "checkpoint_dir": records.checkpoint_dir,
        "live": live,
        "waiting_for": waiting,
        "cluster_error": (records.cluster or {}).get("error"),
        "attempts": rows,
        "timeline": timeline_view(records, rows),
        # how many interruptions of each kind the run survived (core.attempt.interruptions, from the attempt records)
        "interruptions": interruption_counts(records.attempts),
        "checkpoints": checkpoints_view(records),
        "restores": restores_view(records),
        "goodput": goodput_view(records),
        "links": [{"name": name, "url": url} for name, url in sorted(records.links.items()) if url],
        "running": is_live(records),
        "now": records.now,
    }
