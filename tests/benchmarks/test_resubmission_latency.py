"""Benchmark 2 (failure to resubmission latency): the summary arithmetic, and a smoke run of --quick.

The smoke run drives the real launch operator against the local runner (sleeper pods, ~30 s): marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.resubmission_latency import summarize

REPO = Path(__file__).resolve().parents[2]


def _sample(kill_to_failed: float, watch: float, resubmit: float) -> dict[str, float]:
    return {"kill_to_next_s": kill_to_failed + watch + resubmit, "failed_to_next_s": watch + resubmit,
            "kill_to_failed_s": kill_to_failed, "failed_to_retryable_error_s": watch,
            "retryable_error_to_next_s": resubmit}


def test_summary_takes_medians_of_every_part_and_the_worst_case():
    summary = summarize([_sample(0.1, 0.2, 0.05), _sample(0.1, 0.9, 0.05), _sample(0.2, 0.5, 0.06)])
    assert summary["n"] == 3
    assert summary["median_kill_to_next_s"] == pytest.approx(0.76)
    assert summary["median_failed_to_retryable_error_s"] == pytest.approx(0.5)
    assert summary["max_kill_to_next_s"] == pytest.approx(1.05)
    assert summarize([])["max_kill_to_next_s"] is None


@pytest.mark.slow
def test_quick_run_measures_every_resubmission_and_beats_the_baselines(tmp_path):
    out = tmp_path / "resubmission.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.resubmission_latency", "--quick", "--output", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    ours, poll = result["ours"], result["poll"]
    assert (ours["n"], poll["n"]) == (3, 2)
    for sample in ours["samples"] + poll["samples"]:
        parts = sample["kill_to_failed_s"] + sample["failed_to_retryable_error_s"] + sample["retryable_error_to_next_s"]
        assert sample["kill_to_next_s"] == pytest.approx(parts)
        assert 0 < sample["kill_to_failed_s"] < 5 and sample["retryable_error_to_next_s"] > 0
    # A watch that polls every 1 s can take at most ~1 s plus the runner and the resubmission.
    assert ours["max_kill_to_next_s"] < 5
    assert ours["median_kill_to_next_s"] < result["poll_30s_model_s"] < result["airflow_retry"]["estimate_s"]
    assert result["airflow_retry"]["retry_delay_s"] == 300


def test_end_to_end_legs_follow_the_task_instance_through_defer_fail_and_retry():
    from benchmarks.resubmission_e2e import legs

    data = {"jobsets": {"r-abc-a1": {"created": 100.0, "failed": 110.0}, "r-abc-a2": {"created": 121.0,
                                                                                        "failed": None}},
            "ti": [(99.0, "queued", 1), (101.0, "running", 1), (102.0, "deferred", 1), (112.0, "scheduled", 1),
                   (114.0, "up_for_retry", 1), (118.0, "queued", 2), (120.0, "running", 2)]}
    out = legs(data, kill_ts=109.5)
    assert out["kill_to_failed_s"] == 0.5 and out["failed_to_trigger_event_s"] == 2.0
    assert out["trigger_event_to_task_failed_s"] == 2.0 and out["task_failed_to_retry_scheduled_s"] == 4.0
    assert out["retry_scheduled_to_next_jobset_s"] == 3.0 and out["kill_to_next_jobset_s"] == 11.5
    # A polling sensor never defers: no trigger event, the next JobSet still timed from the fault.
    polled = legs({"jobsets": data["jobsets"], "ti": [(99.0, "up_for_reschedule", 1)]}, kill_ts=109.5)
    assert polled["failed_to_trigger_event_s"] is None and polled["kill_to_next_jobset_s"] == 11.5
