"""The run view's figures from what the provider records (core/view/run_page.py), on the records' real formats:
event files written by adapters.workload_events (as the local workload writes them), attempt records and the
progress XCom as operators/jobset.py pushes them."""

from __future__ import annotations

import pytest

from mtc_provider.adapters.workload_events import append_event, read_events
from mtc_provider.core.attempt.attempt_records import read_attempts
from mtc_provider.core.measure.progress_report import progress_report
from mtc_provider.core.view.run_page import RunFacts, Try, attempts_view, live_progress, run_view
from mtc_provider.core.view.run_tiers import checkpoints_view

T0 = 1_800_000_000.0


@pytest.fixture
def events(tmp_path):
    """Try 1: steps 1..14, a host killed, an in-cluster restart restoring step 12 from the local tier, steps to 16;
    try 2 (a new JobSet) restores step 10 from the bucket and reaches 20. Two processes write, as on two hosts."""
    files = [tmp_path / f"process-{p}.jsonl" for p in (0, 1)]

    def emit(ts, event, **fields):
        for process, path in enumerate(files):
            append_event(path, ts=T0 + ts, event=event, process=process, **fields)

    emit(0, "start", step=0)
    for step in range(1, 15):
        emit(10 + step, "step", step=step)
        if step % 4 == 0:
            emit(10 + step + 0.1, "save_end", step=step, tier="local", duration_s=0.1)
        if step == 10:
            emit(10 + step + 0.2, "save_end", step=step, tier="persistent", duration_s=0.3)
    emit(40, "start", step=0)  # the restart inside the same JobSet
    emit(45, "restore", step=12, tier="local", duration_s=0.2)
    for step in range(13, 17):
        emit(45 + step - 12, "step", step=step)
    emit(100, "start", step=0)  # try 2
    emit(105, "restore", step=10, tier="persistent", duration_s=0.5)
    for step in range(11, 21):
        emit(105 + step - 10, "step", step=step)
    emit(115.5, "save_end", step=20, tier="persistent", duration_s=0.3)
    emit(116, "finish", step=20)
    return read_events(tmp_path)


def records(events, **extra) -> RunFacts:
    base = dict(
        dag_id="d", run_id="r", run_state="running", launch_task_id="train",
        tries=[Try(1, "up_for_retry", T0 - 1, T0 + 60), Try(2, "deferred", T0 + 95, None)],
        attempts=[{"attempt": 1, "jobset": "e2e-a1", "start": T0 - 1, "end": T0 + 60, "outcome": "disrupted",
                   "restarts": 0, "last_step": 10, "reason": "JobSet failed"},
                  {"attempt": 2, "jobset": "e2e-a2", "start": T0 + 95, "end": None, "outcome": None,
                   "restarts": 0, "last_step": 10, "reason": ""}],
        checkpoint_dir="/h/buckets/b/e2e/checkpoints", target_step=20, events=events, persistent_steps=[10],
        now=T0 + 116)
    base.update(extra)
    return RunFacts(**{**base, "attempts": read_attempts(base["attempts"])})  # as adapters.airflow_run reads them


def test_attempts_timeline_counts_in_cluster_restarts_from_the_events(events):
    rows = attempts_view(records(events))
    assert [(r["try"], r["jobset"], r["outcome"], r["restarts"]) for r in rows] == [
        (1, "e2e-a1", "disrupted", 1), (2, "e2e-a2", "running", 0)]
    assert rows[0]["step"] == 16 and rows[1]["step"] == 20  # the step each reached, from its events
    assert rows[0]["end"] == T0 + 60 and rows[1]["end"] is None


def test_restarts_and_steps_follow_the_jobset_named_in_the_start_events(tmp_path):
    """The workload's `start` event names its JobSet and restart attempt (local/workload/program.py): a start that
    falls inside another try's time window still counts for its own JobSet only."""
    path = tmp_path / "process-0.jsonl"
    for ts, jobset, restart, step in ((0, "a1", "0", 5), (20, "a1", "1", 9), (61, "a2", "0", 20)):
        append_event(path, ts=T0 + ts, event="start", process=0, step=None, jobset=jobset, restart_attempt=restart)
        append_event(path, ts=T0 + ts + 1, event="step", process=0, step=step)
    late = {"attempt": 1, "jobset": "a1", "start": T0, "end": T0 + 62, "outcome": "disrupted", "restarts": 0}
    rows = attempts_view(records(read_events(path), attempts=[late, {"attempt": 2, "jobset": "a2",
                                                                     "start": T0 + 60, "end": None}]))
    assert [(r["restarts"], r["step"]) for r in rows] == [(1, 9), (0, 20)]


def test_a_new_try_before_its_launch_still_shows_the_last_one(events):
    """Airflow clears the task's XComs when try 2 starts; until try 2 pushes its records, try 1 comes from its
    history row and the events: its JobSet named by the workload's start events, retried, so disrupted."""
    path_events = [{**e, "jobset": "e2e-a1"} if e["event"] == "start" and e["ts"] < T0 + 90 else e for e in events]
    rows = attempts_view(records(path_events, attempts=[],
                                 tries=[Try(1, "failed", T0 - 1, T0 + 60), Try(2, "running", T0 + 95, None)]))
    assert [(r["try"], r["jobset"], r["outcome"], r["restarts"]) for r in rows] == [
        (1, "e2e-a1", "disrupted", 1), (2, None, "running", 0)]


def test_a_record_with_more_restarts_than_the_events_show_wins():
    rows = attempts_view(records(None, attempts=[{"attempt": 1, "jobset": "x", "start": T0, "end": T0 + 9,
                                                   "outcome": "finished", "restarts": 3, "last_step": 7}],
                                 tries=[Try(1, "success", T0, T0 + 9)]))
    assert rows == [{"attempt": 1, "try": 1, "jobset": "x", "start": T0, "end": T0 + 9, "outcome": "finished",
                     "restarts": 3, "step": 7, "state": "success", "reason": "", "interruption": None,
                     "log_path": "/dags/d/runs/r/tasks/train?try_number=1"}]


def test_a_try_without_a_record_yet_shows_from_airflow_alone():
    rows = attempts_view(records(None, attempts=[], tries=[Try(1, "running", T0, None)]))
    assert rows[0]["try"] == 1 and rows[0]["outcome"] == "running" and rows[0]["jobset"] is None


def test_live_step_takes_the_richest_source(events):
    checkpoint_level = progress_report(None, 20, 720.0, newest_checkpoint=10, restarts=1, attempt=2).to_xcom()
    live = live_progress(records(events, progress=checkpoint_level))
    assert live["step"] == 20 and live["source"] == "reported by the workload's events" and live["eta_seconds"] == 0.0
    # GKE: no events visible; the progress XCom (step-level once the trigger writes it) is the figure.
    step_level = progress_report(15, 20, 720.0, newest_checkpoint=10).to_xcom()
    live = live_progress(records(None, progress=step_level, persistent_steps=None))
    assert (live["step"], live["percent"], live["eta_seconds"], live["source"]) == (15, 75.0, 25.0, "progress XCom")
    assert live["newest_checkpoint"] == 10


def test_live_step_never_goes_back_to_a_lagging_xcom(events):
    ahead = progress_report(19, 20, None, newest_checkpoint=10).to_xcom()
    early = [e for e in events if e["ts"] <= T0 + 110]  # events up to step 15 of try 2
    assert live_progress(records(early, progress=ahead))["step"] == 19


def test_checkpoints_by_tier(events):
    tiers = {t["tier"]: t for t in checkpoints_view(records(events))}
    assert tiers["local"]["steps"] == [4, 8, 12] and tiers["local"]["visible"]
    assert tiers["persistent"]["steps"] == [10, 20]
    assert not tiers["replicator"]["visible"] and "GKE" in tiers["replicator"]["note"]
    gke = {t["tier"]: t for t in checkpoints_view(records(None, persistent_steps=None,
                                                          progress={"newest_checkpoint": 3000}))}
    assert gke["persistent"]["steps"] == [3000] and not gke["local"]["visible"]


def test_the_whole_view_has_restores_and_live_goodput(events):
    view = run_view(records(events))
    assert [(r["step"], r["tier"]) for r in view["restores"]] == [(12, "local"), (10, "persistent")]
    assert view["goodput"]["final"] is False and 0 < view["goodput"]["goodput"] < 1
    assert set(view["goodput"]["badput_s"]) >= {"restore", "downtime", "wasted_progress"}
    assert view["running"] is True
    final = run_view(records(events, run_state="success", goodput={"goodput": 0.5, "productive_s": 1,
                                                                  "elapsed_s": 2, "badput_s": {}, "source": "x"}))
    assert final["goodput"]["final"] is True and final["goodput"]["goodput"] == 0.5 and not final["running"]


def test_the_live_step_says_where_it_came_from():
    """The trigger's progress XCom carries its step's source and the restorable step (core.measure.progress, issue 32)."""
    figures = {**progress_report(1560, 19999, 1580.0, newest_checkpoint=1000, source="workload-log").to_xcom(),
               "alive_step": 1560, "alive_source": "workload-log", "restorable_step": 1000,
               "restorable_source": "checkpoints"}
    live = live_progress(records(None, progress=figures, persistent_steps=None))
    assert live["source"] == "progress XCom: reported by the leader's log"
    assert (live["restorable_step"], live["restorable_source"]) == (1000, "checkpoints")


def test_an_ended_runs_timeline_spans_the_run_not_now(events):
    """Item 4 (issue 35): opened a day later, the bars of an ended run still fill its span (first start to last
    end), the span the goodput summary's wall time measures; while it goes on the span runs to now."""
    ended = records(events, run_state="success", now=T0 + 86_400, run_end=T0 + 130,
                    tries=[Try(1, "up_for_retry", T0 - 1, T0 + 60), Try(2, "success", T0 + 95, T0 + 117)],
                    attempts=[{"attempt": 1, "jobset": "e2e-a1", "start": T0 - 1, "end": T0 + 60},
                              {"attempt": 2, "jobset": "e2e-a2", "start": T0 + 95, "end": T0 + 117}])
    shown = run_view(ended)
    assert (shown["timeline"]["start"], shown["timeline"]["end"]) == (T0 - 1, T0 + 117)
    last = shown["timeline"]["bars"][-1]
    assert last["left"] + last["width"] == pytest.approx(100.0)
    assert shown["running"] is False and shown["waiting_for"] is None
    going = run_view(records(events, now=T0 + 200))
    assert going["timeline"]["end"] == T0 + 200 and going["running"] is True


def test_a_try_waiting_for_its_jobset_is_not_shown_running(events):
    """Item 4: a try that runs but has submitted no JobSet yet says so; the ETA is not a frozen figure."""
    waiting = records(None, attempts=[], tries=[Try(1, "running", T0, None)], persistent_steps=None,
                      progress=progress_report(15, 20, 720.0, newest_checkpoint=10).to_xcom())
    shown = run_view(waiting)
    assert shown["waiting_for"] == "the JobSet of try 1 to be submitted"
    assert shown["attempts"][0]["outcome"] == "waiting" and shown["live"]["eta"] == "waiting"
    queued = run_view(records(None, attempts=[], tries=[Try(1, "queued", None, None)], persistent_steps=None))
    assert queued["waiting_for"].startswith("a worker to start try 1")


def test_maxtexts_own_goodput_is_shown_beside_ours(events):
    """Item 2: the goodput task's report carries MaxText's figures (ml-goodput-measurement) under `library`."""
    library = {"source": "ml-goodput-measurement", "goodput": 0.81, "badput": {"unproductive_checkpoint_save_time": 0.02}}
    final = run_view(records(events, run_state="success", goodput={
        "goodput": 0.7, "productive_s": 70.0, "elapsed_s": 100.0, "badput_s": {}, "recovery_s": [], "disruptions": 1,
        "last_productive_step": 20, "source": "workload events", "library": library}))
    assert final["goodput"]["goodput"] == 0.7 and final["goodput"]["library"] == library
    assert run_view(records(events))["goodput"]["library"] is None  # so far: ours only


def test_capacity_and_image_pulls_are_named_from_the_pods(events):
    """Item 4: the watched JobSet's pods as adapters/run_cluster.py reads them (PodScheduled=False reason
    Unschedulable with the scheduler's message; a container waiting in ImagePullBackOff)."""
    pending = {"name": "p-0", "phase": "Pending", "leader": True, "waiting": "Unschedulable",
               "message": "0/12 nodes are available: 12 Insufficient google.com/tpu."}
    shown = run_view(records(None, persistent_steps=None, cluster={"pods": [pending]}))
    assert shown["waiting_for"] == ("capacity: pod p-0 is unschedulable "
                                    "(0/12 nodes are available: 12 Insufficient google.com/tpu.)")
    pulling = {**pending, "waiting": "ImagePullBackOff", "message": "Back-off pulling image"}
    assert run_view(records(None, persistent_steps=None, cluster={"pods": [pulling]}))["waiting_for"] == \
        "the image pull: pod p-0 ImagePullBackOff (Back-off pulling image)"
    training = {**pending, "phase": "Running", "waiting": ""}
    assert run_view(records(None, persistent_steps=None, cluster={"pods": [training]}))["waiting_for"] is None
