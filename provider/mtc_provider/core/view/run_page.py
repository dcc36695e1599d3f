"""The training-run view (pure): what Airflow recorded about one DAG run, turned into what the page shows.

The plugin (plugins/run_view.py) reads the records through Airflow's models (adapters/airflow_run.py) and hands
them here as plain values: the launch task's tries, its `attempts`, `progress` and `ledger` XComs, the local
workload's events where the api-server can see them, and the goodput task's result (docs/run-view.md tables which
figure comes from where). `live_progress` is the one place that decides which figure is "the step now": the richest
source wins, so the progress XComs the trigger writes during the run are picked up at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from mtc_provider.core.attempt.outcomes import DISRUPTED, FAILED_OUTCOME, FINISHED
from mtc_provider.core.basics.install import install_line
from mtc_provider.core.measure.progress_report import format_duration
from mtc_provider.core.view.run_tiers import (TIER_TITLES, as_int, as_number, checkpoints_view, ledger_starts,
                                              interruption_counts, read_ledger, restores_view)

if TYPE_CHECKING:
    from mtc_provider.core.attempt.attempt_records import AttemptRecord

LAUNCH_OPERATOR = "MtcJobSetOperator"
GOODPUT_OPERATOR = "GoodputReportOperator"
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
    attempts: list[AttemptRecord] = field(default_factory=list)  # the `attempts` XCom (core.attempt.attempt_records)
    progress: Mapping[str, Any] | None = None  # the `progress` XCom
    jobset: Mapping[str, Any] | None = None  # the `jobset` XCom (result of the last closed attempt)
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
    # The run ledger (its dict form: the launch task's `ledger` XCom, or the run record's "ledger"), when the
    # provider that ran the run writes one: starts, restores, steps over time, saves by tier, interruptions.
    ledger: Mapping[str, Any] | None = None


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
        signal.observe(progress["step"], source, records.now, at=as_number(progress.get("updated_at")))
    xcom = signal.alive
    reported, reported_source = reported_steps(records)
    if reported:
        # What the workload reports now is its own count, also after an in-cluster restore went back: it replaces
        # a step the XCom took from the same kind of source (saves stay: they never go back).
        signal.new_start()
        signal.observe(reported[-1][1], reported_source, records.now, at=reported[-1][0])
    alive = signal.alive
    rate = as_number(progress.get("steps_per_hour"))
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


def live_restarts(records: RunFacts) -> tuple[int | None, int]:
    """(attempt, in-cluster restarts so far) of the attempt being watched, from the trigger's progress record
    (the JobSet's `status.restarts` as the trigger read it); (None, 0) when it reports none."""
    progress = records.progress or {}
    return as_int(progress.get("attempt")), as_int(progress.get("restarts")) or 0


def attempts_view(records: RunFacts) -> list[dict[str, Any]]:
    """One row per attempt (one JobSet), with the Airflow try it ran in: several attempts can share a try (one
    that progressed is followed in the same try), so the two are separate numbers. A try that never recorded an
    attempt (queued, or failed before its submission) has a row of its own without an attempt number.

    In-cluster restarts: the most of the attempt record's (closed attempts), the trigger's progress record (the
    attempt being watched, live), the ledger's starts and the workload's own start events."""
    by_attempt = {record.attempt: record for record in records.attempts if record.attempt is not None}
    runs = _event_runs(records.events or [])
    tries = {t.try_number: t for t in records.tries if t.try_number}
    live_attempt, live_count = live_restarts(records)
    ledger_restarts: dict[int, int] = {}
    for start in ledger_starts(records):
        ledger_restarts[start.attempt] = max(ledger_restarts.get(start.attempt, 0), start.restart)
    try_of = {number: record.try_number or number for number, record in by_attempt.items()}
    rows = []
    for number in sorted(by_attempt):
        record = by_attempt[number]
        try_number = try_of[number]
        t = tries.get(try_number)
        last_of_try = number == max(n for n, tn in try_of.items() if tn == try_number)
        start, end = record.start, record.end
        if end is None and t is not None and last_of_try and t.state not in ("running", "deferred", "queued", None):
            end = t.end  # the try ended without closing its record (the worker died)
        inside = _runs_of(runs, record.jobset, start, end)
        jobset = record.jobset or next((r["jobset"] for r in inside if r["jobset"]), None)
        numbered = [r["restart"] for r in inside if r["restart"] is not None]
        restarts = max(record.restarts, max(numbered) if numbered else len(inside) - 1,
                       ledger_restarts.get(number, 0), live_count if number == live_attempt and end is None else 0)
        step = record.last_step if end is not None else None
        seen = [r["step"] for r in inside if r["step"] is not None]
        if seen:
            step = max(seen) if step is None else max(step, max(seen))
        outcome = record.outcome or (_outcome_of(t.state) if t is not None and last_of_try else None)
        if outcome == FAILED_OUTCOME and not record.outcome and try_number < max(tries, default=0):
            outcome = DISRUPTED  # Airflow tried again: a resubmission
        rows.append({"attempt": number, "try": try_number, "jobset": jobset, "start": start, "end": end,
                     "outcome": outcome or ("running" if end is None else DISRUPTED), "restarts": restarts,
                     "step": step, "state": t.state if t is not None and last_of_try else None,
                     "reason": record.reason, "interruption": record.interruption})
    recorded_tries = set(try_of.values())
    for number in sorted(set(tries) - recorded_tries):
        t = tries[number]  # e.g. Airflow cleared the XComs at a new try's start: the workload's events still tell
        end = t.end if t.state not in ("running", "deferred", "queued") else None
        inside = _runs_of(runs, None, t.start, end)
        numbered = [r["restart"] for r in inside if r["restart"] is not None]
        seen = [r["step"] for r in inside if r["step"] is not None]
        outcome = _outcome_of(t.state)
        if outcome == FAILED_OUTCOME and number < max(tries):
            outcome = DISRUPTED
        rows.append({"attempt": None, "try": number, "jobset": next((r["jobset"] for r in inside if r["jobset"]), None),
                     "start": t.start, "end": end, "outcome": outcome or "running",
                     "restarts": max(numbered) if numbered else max(0, len(inside) - 1),
                     "step": max(seen) if seen else None, "state": t.state, "reason": "", "interruption": None})
    for row in rows:
        row["log_path"] = log_path(records, row["try"])
    return sorted(rows, key=lambda r: (r["try"], r["attempt"] is not None, r["attempt"] or 0))


def log_path(records: RunFacts, try_number: int | None) -> str | None:
    """The launch task's log of one try in Airflow's UI, below its root: the route `dags/:dagId/runs/:runId/tasks/
    :taskId` opens on its logs, and the UI reads the try from the `try_number` query parameter (Airflow 3's UI
    bundle, SearchParamsKeys.TRY_NUMBER)."""
    from urllib.parse import quote

    if not records.launch_task_id or not try_number:
        return None
    return (f"/dags/{quote(records.dag_id, safe='')}/runs/{quote(records.run_id, safe='')}/tasks/"
            f"{quote(records.launch_task_id, safe='')}?try_number={try_number}")


def _outcome_of(state: str | None) -> str | None:
    return {"success": FINISHED, "failed": FAILED_OUTCOME, "up_for_retry": DISRUPTED}.get(state or "")


# Where MaxText's own figure comes from, said where it is missing (the goodput task reads it on a worker)
LIBRARY_NOTE = ("MaxText's own figure: recorded with enable_goodput_recording=true, read by the goodput task "
                "(goodput_recording=True) with the `goodput` extra on the workers (ml-goodput-measurement: "
                f"{install_line('goodput')})")
GOODPUT_KEYS = ("goodput", "productive_s", "elapsed_s", "badput_s", "recovery_s", "disruptions", "last_productive_step")


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
    if isinstance(progress.get("step"), int) and as_number(progress.get("updated_at")):
        points.append((progress["step"], float(progress["updated_at"])))
    if records.log_steps:
        at, step = max(records.log_steps)
        points.append((step, at))
    return timeline_from_checkpoints(attempts, points), "the attempts and their progress (coarse)"


def chart_data(records: RunFacts) -> tuple[Any, dict[str, Any]] | None:
    """(Timeline, the ledger's marks) the run's chart draws: the run ledger's intervals over the span goodput
    measures (core.view.run_goodput.timeline_from_ledger, chart_marks) when the run has a ledger with a start,
    else run_timeline's; None before anything was recorded."""
    from mtc_provider.core.view.run_goodput import chart_marks, timeline_from_ledger

    ledger, _ = read_ledger(records)
    if ledger is not None and ledger.starts:
        return timeline_from_ledger(ledger, end=_run_span(records, attempts_view(records))[1]), chart_marks(ledger)
    found = run_timeline(records)
    return (found[0], {}) if found is not None else None


def _run_span(records: RunFacts, rows: Sequence[Mapping[str, Any]]) -> tuple[float | None, float]:
    """(begin, end) the goodput figures measure: the first launch (attempt or try) to now while the run goes on,
    else to its last attempt's end."""
    starts = [r["start"] for r in rows if r.get("start")]
    ends = [r["end"] for r in rows if r.get("end")]
    if is_live(records):
        end = records.now
    else:
        end = max(ends) if ends else records.run_end or records.now
    return (min(starts) if starts else records.run_start), end


def _waiting_for_capacity(records: RunFacts, rows: Sequence[Mapping[str, Any]]) -> bool:
    return (waiting_for(records, rows) or "").startswith("capacity")


def attempt_spans(records: RunFacts, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each attempt's span and steps for goodput without a ledger: the step it resumed from (the previous
    attempt's kept step; an open record's own `last_step` is its start step) and the step it kept (its record's
    `last_step` once closed: what the next attempt resumed from; the live step while it goes on)."""
    by_attempt = {r.attempt: r for r in records.attempts if r.attempt is not None}
    live_step = live_progress(records)["step"]
    spans, kept = [], None
    for row in rows:
        if row["attempt"] is None or not row["start"]:
            continue
        record = by_attempt[row["attempt"]]
        ended = record.end is not None
        since = kept if kept is not None else (0 if ended else record.last_step or 0)
        reached = record.last_step if ended else (live_step if row["end"] is None else row["step"])
        spans.append({"start": row["start"], "end": row["end"], "from_step": since, "kept_step": reached})
        kept = reached if reached is not None else kept
    return spans


def goodput_view(records: RunFacts) -> dict[str, Any] | None:
    """The goodput task's report once it ran; before that, goodput so far (core.view.run_goodput): from the run
    ledger's intervals when the run has one, else from the workload's events where the api-server sees them
    (local target: every step), else from the attempts' kept steps at the measured step time. MaxText's own
    figures (ml-goodput-measurement, read by the goodput task) beside ours."""
    if records.goodput and isinstance(records.goodput.get("goodput"), (int, float)):
        library = records.goodput.get("library")
        return {**{k: records.goodput.get(k) for k in GOODPUT_KEYS},
                "source": f"goodput task ({records.goodput.get('source') or 'report'})", "final": True,
                "library": library if isinstance(library, Mapping) else None,
                "library_note": None if isinstance(library, Mapping) else LIBRARY_NOTE}
    from mtc_provider.core.view.run_goodput import goodput_from_attempts, goodput_from_ledger

    rows = attempts_view(records)
    begin, end = _run_span(records, rows)
    waiting = _waiting_for_capacity(records, rows)
    unread = ""

    def so_far(report: Mapping[str, Any] | None, source: str) -> dict[str, Any]:
        figures = {k: (report or {}).get(k) for k in GOODPUT_KEYS}
        return {**figures, "badput_s": figures["badput_s"] or {}, "recovery_s": figures["recovery_s"] or [],
                "source": source + unread, "final": False, "library": None, "library_note": LIBRARY_NOTE,
                "waiting": waiting}

    ledger, why = read_ledger(records)
    if ledger is not None:
        return so_far(goodput_from_ledger(ledger, end=end, begin=begin, waiting=waiting),
                      "so far, from the run ledger's intervals")
    if why:  # a ledger this version cannot read: said, and the next source is used
        unread = f" (the run ledger was not read: {why})"
    if records.events:
        found = run_timeline(records)
        if found is not None:
            from mtc_provider.core.view.goodput import compute_goodput

            timeline, source = found
            return so_far(compute_goodput(timeline).to_payload(), f"so far, from {source}")
    rate = live_progress(records)["steps_per_hour"] or as_number((records.progress or {}).get("steps_per_hour"))
    report = goodput_from_attempts(attempt_spans(records, rows), end=end, begin=begin, waiting=waiting,
                                   step_seconds=3600.0 / rate if rate else None)
    if report is not None:
        return so_far(report, "so far, from the attempts' kept steps at the measured step time")
    if not any(r["start"] for r in rows):
        return None
    return so_far(None, "not yet: no step time measured (no ledger; the trigger reports the rate once steps are seen)")


def chart_title(goodput: Mapping[str, Any], span: Mapping[str, Any]) -> str:
    """The chart's title: the summary's goodput over the summary's wall time, and the span it covers."""
    start, end = span.get("start"), span.get("end")
    when = f" ({_utc(start, dated=True)} - {_utc(end, dated=True)})" if start and end else ""  # runs last days
    return (f"goodput {100 * (goodput.get('goodput') or 0):.1f}% over "
            f"{format_duration(goodput.get('elapsed_s'))}{when}")


ACTIVE_TRY_STATES = ("running", "deferred")
QUEUED_TRY_STATES = (None, "", "none", "scheduled", "queued")


def _utc(t: float, dated: bool = False) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC" if dated else "%H:%M:%S UTC")


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
    row = next((r for r in reversed(rows) if r["try"] == number), None)
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
        bars.append({"try": r["try"], "attempt": r.get("attempt"), "outcome": r["outcome"],
                     "left": round(100 * (r["start"] - begin) / span, 3),
                     "width": round(max(0.5, 100 * (stop - r["start"]) / span), 3)})
    return {"start": begin, "end": finish, "bars": bars}


def run_view(records: RunFacts) -> dict[str, Any]:
    """The JSON the page polls."""
    rows = attempts_view(records)
    live = live_progress(records)
    waiting = waiting_for(records, rows)
    checkpoints = checkpoints_view(records)
    tiers = {c["tier"]: c for c in checkpoints}
    restorable = [(c["newest"], c["tier"]) for c in checkpoints if c["tier"] != "local" and c["newest"] is not None]
    # the run's newest persistent step (any attempt's), never a replicator backup; what a new attempt resumes
    # from beside it
    live = {**live, "newest_checkpoint": tiers["persistent"]["newest"],
            "newest_restorable": max(restorable)[0] if restorable else None,
            "newest_restorable_tier": TIER_TITLES[max(restorable)[1]] if restorable else None}
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
        # how many interruptions of each kind the run survived (core.view.run_tiers: the ledger's, else the records')
        "interruptions": interruption_counts(records, rows),
        "checkpoints": checkpoints,
        "restores": restores_view(records),
        "goodput": goodput_view(records),
        "links": [{"name": name, "url": url} for name, url in sorted(records.links.items()) if url],
        "running": is_live(records),
        "now": records.now,
    }
