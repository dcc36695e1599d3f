"""Goodput: hand-computed timelines (see the arithmetic in each test), from the dataclasses and from events."""

from __future__ import annotations

import pytest

from mtc_provider.core.view.goodput import (
    Attempt,
    Restore,
    Save,
    StepRecord,
    Timeline,
    compute_goodput,
    timeline_from_checkpoints,
    timeline_from_workload_events,
)


def two_disruptions() -> Timeline:
    # Attempt 0 [0,55] preempted: steps 1@20 (first: 20 = 10 ideal + 10 compile), 2@30, 3@42 (2 s blocking save
    # of step 2 at 30), 4@52. Attempt 1 [60,100] fails: restore step 2 [65,70], steps 3@85 (15: 5 compile), 4@95.
    # Attempt 2 [110,140] finishes: restore step 2 [112,114], steps 3@124, 4@134.
    return Timeline(
        attempts=[Attempt(0, 55, "disrupted"), Attempt(60, 100, "failed"), Attempt(110, 140, "finished")],
        steps=[StepRecord(0, 1, 20), StepRecord(0, 2, 30), StepRecord(0, 3, 42), StepRecord(0, 4, 52),
               StepRecord(1, 3, 85), StepRecord(1, 4, 95), StepRecord(2, 3, 124), StepRecord(2, 4, 134)],
        restores=[Restore(1, 2, 65, 70), Restore(2, 2, 112, 114)],
        saves=[Save(2, 30, blocking_s=2, end=33)],
    )


EXPECTED = {
    "elapsed_s": 140.0,
    "productive_s": 40.0,  # steps 1,2 of attempt 0 and 3,4 of attempt 2, 10 s each
    "badput_s": {
        "startup": 22.0,  # 10 compile (a0) + 5 compile (a1) + 5 before restore (a1) + 2 before restore (a2)
        "restore": 7.0,  # 5 + 2
        "checkpoint_save": 2.0,
        "wasted_progress": 40.0,  # steps 3,4 of a0 and of a1 were redone from step 2
        "downtime": 15.0,  # 55->60 and 100->110
        "other": 14.0,  # after the last step of each attempt: 3 + 5 + 6
    },
    "recovery_s": [15.0, 14.0],  # 55 -> restore done at 70; 100 -> 114
    "disruptions": 2,
    "last_productive_step": 4,
    "ideal_step_s": 10.0,
}


def test_two_disruptions_by_hand():
    report = compute_goodput(two_disruptions())
    payload = report.to_payload()
    goodput = payload.pop("goodput")
    assert goodput == pytest.approx(40 / 140)
    assert payload == EXPECTED
    assert sum(report.badput_s.values()) + report.productive_s == pytest.approx(report.elapsed_s)


def test_from_workload_events_gives_the_same_report():
    events = []
    for process in (1, 0):  # every process logs the same steps; the lead (lowest id) is read
        events += [
            {"ts": 0, "event": "start", "process": process, "step": 0},
            *({"ts": t, "event": "step", "process": process, "step": s} for s, t in [(1, 20), (2, 30), (3, 42), (4, 52)]),
            {"ts": 30, "event": "save_start", "process": process, "step": 2, "tier": "persistent", "blocking_s": 2},
            {"ts": 33, "event": "save_end", "process": process, "step": 2, "tier": "persistent", "duration_s": 3},
            {"ts": 55, "event": "preempted", "process": process, "step": 4},
            {"ts": 60, "event": "start", "process": process, "step": 0},
            {"ts": 70, "event": "restore", "process": process, "step": 2, "tier": "persistent", "duration_s": 5},
            {"ts": 85, "event": "step", "process": process, "step": 3},
            {"ts": 95, "event": "step", "process": process, "step": 4},
            {"ts": 100, "event": "error", "process": process, "step": 4},
            {"ts": 110, "event": "start", "process": process, "step": 0},
            {"ts": 114, "event": "restore", "process": process, "step": 2, "tier": "local", "duration_s": 2},
            {"ts": 124, "event": "step", "process": process, "step": 3},
            {"ts": 134, "event": "step", "process": process, "step": 4},
            {"ts": 140, "event": "finish", "process": process, "step": 4, "params_sha256": "x"},
        ]
    timeline = timeline_from_workload_events(events)
    assert [a.outcome for a in timeline.attempts] == ["disrupted", "failed", "finished"]
    payload = compute_goodput(timeline).to_payload()
    payload.pop("goodput")
    assert payload == EXPECTED


def test_killed_attempt_ends_at_its_last_event():
    events = [{"ts": 0, "event": "start", "process": 0, "step": 0}, {"ts": 10, "event": "step", "process": 0, "step": 1},
              {"ts": 20, "event": "start", "process": 0, "step": 0}, {"ts": 30, "event": "step", "process": 0, "step": 1},
              {"ts": 31, "event": "finish", "process": 0, "step": 1}]
    timeline = timeline_from_workload_events(events)
    assert timeline.attempts == [Attempt(0, 10, "disrupted"), Attempt(20, 31, "finished")]
    report = compute_goodput(timeline)
    # No restore: the second attempt started over, so step 1 of attempt 0 (10 s) was wasted.
    assert report.badput_s["wasted_progress"] == 10.0 and report.productive_s == 10.0
    assert report.badput_s["downtime"] == 10.0 and report.recovery_s == [10.0]


def test_uninterrupted_run_and_empty_timeline():
    timeline = Timeline([Attempt(0, 40, "finished")], [StepRecord(0, s, 10.0 * s) for s in (1, 2, 3, 4)])
    report = compute_goodput(timeline)
    assert report.goodput == 1.0 and report.disruptions == 0 and report.recovery_s == []
    empty = compute_goodput(Timeline())
    assert empty.goodput == 0.0 and empty.elapsed_s == 0.0


def test_gke_timeline_from_commit_times():
    # Checkpoints every 100 steps, committed at 1000 s intervals; a disruption at 2500 resumed from step 200.
    attempts = [Attempt(0, 2500, "disrupted"), Attempt(2600, 4100, "finished")]
    checkpoints = [(100, 1000.0), (200, 2000.0), (300, 3600.0), (400, 4100.0)]
    timeline = timeline_from_checkpoints(attempts, checkpoints, [Restore(1, 200, 2600, 2700)])
    assert [(s.attempt, s.step) for s in timeline.steps] == [(0, 100), (0, 200), (1, 300), (1, 400)]
    report = compute_goodput(timeline)
    # Intervals: 1000 (first of a0), 1000, 900 (first of a1, from 2700), 500. Ideal = median(1000, 500) = 750.
    assert report.ideal_step_s == 750.0
    assert report.productive_s == 750 + 1000 + 750 + 500
    assert report.badput_s["startup"] == 250 + 150  # first-interval excess in each attempt
    assert report.recovery_s == [200.0]


def test_the_example_of_docs_goodput_md():
    """docs/goodput.md works one run through by hand; the code gives the same figures."""
    from pathlib import Path

    from mtc_provider.core.view.goodput import Attempt, Restore, StepRecord, Timeline, compute_goodput

    timeline = Timeline(attempts=[Attempt(0, 100, "disrupted"), Attempt(110, 155, "finished")],
                        steps=[StepRecord(0, 1, 20), StepRecord(0, 2, 40), StepRecord(0, 3, 60), StepRecord(0, 4, 80),
                               StepRecord(1, 3, 135), StepRecord(1, 4, 155)],
                        restores=[Restore(1, 2, 110, 115)])
    report = compute_goodput(timeline)
    assert (report.elapsed_s, report.productive_s, round(report.goodput * 100, 1)) == (155, 80, 51.6)
    assert report.badput_s == {"startup": 0, "restore": 5, "checkpoint_save": 0, "wasted_progress": 40,
                               "downtime": 10, "other": 20}
    assert (report.disruptions, report.recovery_s, report.ideal_step_s) == (1, [15], 20)
    page = (Path(__file__).resolve().parents[2] / "docs" / "goodput.md").read_text()
    for figure in ("goodput\n51.6%", "`restore` 5 s, `downtime` 10 s, `wasted_progress` 40 s, `other` 20 s",
                   "recovery 15 s"):
        assert figure.replace("\n", " ") in page.replace("\n", " "), figure
