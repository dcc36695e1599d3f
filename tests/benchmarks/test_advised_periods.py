"""Benchmark 7's pure parts: the seeded Poisson fault process, the run order and the summary."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.advised_periods import calibration_faults, poisson_fault_plan, run_order, summarize


def test_the_fault_process_is_seeded_poisson_at_the_given_rates():
    plan = poisson_fault_plan(3, 1 / 60, 1 / 120, 400)
    assert plan == poisson_fault_plan(3, 1 / 60, 1 / 120, 400)  # same seed, same faults
    assert plan != poisson_fault_plan(4, 1 / 60, 1 / 120, 400)
    times = [f["at_seconds"] for f in plan]
    assert times == sorted(times) and all(0 < t <= 400 for t in times)
    assert {f["kind"] for f in plan} <= {"sigkill_host", "wipe_ramdisk"}
    assert all(f["slice"] == 1 for f in plan if f["kind"] == "wipe_ramdisk")  # the slice holding the local copies
    # Over many seeds the counts match the rates: 400 s at 1/60 -> 6.67 host losses, 1/120 -> 3.33 slice losses.
    hosts = [sum(f["kind"] == "sigkill_host" for f in poisson_fault_plan(s, 1 / 60, 1 / 120, 400)) for s in range(400)]
    slices = [sum(f["kind"] == "wipe_ramdisk" for f in poisson_fault_plan(s, 1 / 60, 1 / 120, 400)) for s in range(400)]
    assert statistics.fmean(hosts) == pytest.approx(400 / 60, rel=0.08)
    assert statistics.fmean(slices) == pytest.approx(400 / 120, rel=0.1)
    assert statistics.variance(hosts) == pytest.approx(400 / 60, rel=0.25)  # Poisson: variance = mean
    assert poisson_fault_plan(0, 0.0, 0.0, 400) == []


def test_runs_interleave_and_the_calibration_faults_hit_both_tiers():
    assert run_order(3) == [("default", 0), ("advised", 0), ("advised", 1), ("default", 1), ("default", 2),
                            ("advised", 2)]
    host, wipe = calibration_faults(60)
    assert (host["kind"], host["at_step"], wipe["kind"], wipe["at_step"], wipe["slice"]) == \
        ("sigkill_host", 20, "wipe_ramdisk", 40, 1)


def test_summary_means_ratio_and_prediction_error():
    runs = [{"arm": "default", "seed": 0, "goodput": 0.4}, {"arm": "advised", "seed": 0, "goodput": 0.5},
            {"arm": "default", "seed": 1, "goodput": 0.2}, {"arm": "advised", "seed": 1, "goodput": 0.3},
            {"arm": "advised", "seed": 2, "goodput": None}]
    out = summarize(runs, {"default": 0.33, "advised": 0.36})
    assert out["arms"]["default"]["mean_goodput"] == pytest.approx(0.3)
    assert out["arms"]["advised"]["mean_goodput"] == pytest.approx(0.4) and out["arms"]["advised"]["runs"] == 2
    assert out["ratio"] == pytest.approx(4 / 3)
    assert out["predicted_ratio"] == pytest.approx(0.36 / 0.33)
    assert out["arms"]["default"]["prediction_error"] == pytest.approx(0.1)
    assert out["arms"]["advised"]["prediction_error"] == pytest.approx(-0.1)
    assert out["per_seed_ratio"][0] == pytest.approx(1.25) and out["per_seed_ratio"][2] is None


def test_model_from_runs_pools_the_figures_of_an_arms_runs():
    from benchmarks.advised_periods import model_from_runs

    base = {"step_s": 1.0, "save_local_s": 0.5, "save_persistent_s": 1.0, "restore_local_s": 2.0,
            "restore_persistent_s": None, "restart_s": 10.0, "startup_s": 20.0}
    runs = [{**base, "failures": {"host_loss": 1, "slice_loss": 0, "preemption": 0}, "exposure_s": 100.0},
            {**base, "restart_s": 14.0, "failures": {"host_loss": 0, "slice_loss": 1, "preemption": 0},
             "exposure_s": 100.0}]
    out = model_from_runs(runs, (2, 4), 100, 1.0)
    assert out["costs"]["restart_s"] == 12.0 and out["costs"]["restore_persistent_s"] == 2.0
    assert out["rates"]["host_loss"] == pytest.approx(1 / 200) and out["rates"]["slice_loss"] == pytest.approx(1 / 200)
    # tau = 1 + 0.5*(1/2 - 1/4) + 1/4 = 1.375; host 2*1.375/2 + 12 + 2 = 15.375; slice 4*1.375/2 + 14 = 16.75
    load = (15.375 + 16.75) / 200
    assert out["expected_wall_s"] == pytest.approx(100 * 1.375 / (1 - load))  # start-up left out
    assert out["startup_s"] == 20.0
    assert out["predicted_goodput"] == pytest.approx(100 / out["expected_wall_s"])


def test_goodput_after_startup_counts_from_the_first_step_to_the_finish():
    from benchmarks.advised_periods import goodput_after_startup

    events = [{"ts": 0.0, "event": "start", "process": 0}, {"ts": 30.0, "event": "step", "process": 0, "step": 1},
              {"ts": 31.0, "event": "step", "process": 1, "step": 1},
              {"ts": 40.0, "event": "step", "process": 0, "step": 11},
              {"ts": 50.0, "event": "finish", "process": 0, "step": 11}]
    assert goodput_after_startup(events, 0.5) == pytest.approx(10 * 0.5 / 20)
    assert goodput_after_startup(events[:3], 0.5) is None  # never finished
