"""Benchmark 2c's pure parts: the arms' order and the summary's medians and ratios."""

from __future__ import annotations

import pytest

from benchmarks.retry_setup import GOAL_S, order, summarize


def test_each_round_runs_every_arm_and_reverses_the_last():
    assert order(2) == ["ours", "client_per_request", "floor", "floor", "client_per_request", "ours"]
    assert order(1, ("ours", "before")) == ["ours", "before"]


def test_the_summary_reports_medians_and_the_ratios_against_the_same_runs_baselines():
    samples = [{"arm": "ours", "execute_s": 0.8, "acquire_s": 0.3, "clients": 2},
               {"arm": "ours", "execute_s": 1.0, "acquire_s": 0.5, "clients": 2},
               {"arm": "client_per_request", "execute_s": 1.2, "acquire_s": 0.6, "clients": 9},
               {"arm": "floor", "execute_s": 0.6}]
    result = summarize(samples)
    assert result["arms"]["ours"] == {"n": 2, "execute_s": pytest.approx(0.9), "acquire_s": pytest.approx(0.4),
                                      "clients": 2}
    assert result["ours_over_floor"] == pytest.approx(1.5)
    assert result["ours_over_client_per_request"] == pytest.approx(0.75)
    assert result["goal_met"] is (0.9 < GOAL_S)


def test_the_summary_reports_the_acquire_against_the_base_and_against_one_round_trip():
    samples = [{"arm": "ours", "execute_s": 0.8, "acquire_s": 0.3, "acquire_warm_s": 0.02, "roundtrip_s": 0.005},
               {"arm": "before", "execute_s": 1.6, "acquire_s": 0.6, "acquire_warm_s": 0.2, "roundtrip_s": 0.05},
               {"arm": "floor", "execute_s": 0.6}]
    result = summarize(samples)
    assert result["acquire_ours_over_before"] == pytest.approx(0.5)
    assert result["acquire_warm_ours_over_before"] == pytest.approx(0.1)
    assert result["acquire_warm_over_roundtrip"] == {"ours": pytest.approx(4.0), "before": pytest.approx(4.0)}
    assert "acquire_ours_over_floor" not in result  # the floor takes no lock
