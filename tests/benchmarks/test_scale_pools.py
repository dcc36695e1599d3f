"""Benchmark 8's pools comparison (issue 34): the shipped topology against the same topology without the pools,
as a ratio measured in one run."""

from __future__ import annotations

from benchmarks.scale_rehearsal import ARMS, TopologyArm, summarize


def _arm(p50: float, p99: float, full: int) -> dict:
    return {"all_succeeded": True, "scheduler_parallelism_full": full,
            "resubmission": {"fault_to_next_jobset_s": {"p50": p50, "p99": p99}}}


def test_the_pools_are_compared_with_the_same_topology_without_them():
    out = summarize({"topology": _arm(6.0, 20.0, 10), "topology_no_pools": _arm(12.0, 80.0, 400)})
    ratios = out["ratio_topology_to_topology_no_pools"]
    assert ratios["resubmission_p50"] == 0.5 and ratios["resubmission_p99"] == 0.25
    assert ratios["scheduler_parallelism_full"] == 0.025
    assert out["topology"]["resubmission_p99_goal_met"] and not out["topology_no_pools"]["resubmission_p99_goal_met"]
    assert "ratio_topology_to_sqlite" not in out


def test_the_comparison_arm_differs_from_the_shipped_one_only_by_its_pools():
    shipped, bare = ARMS["topology"], ARMS["topology_no_pools"]
    assert shipped is TopologyArm and issubclass(bare, shipped)
    assert shipped.pools and not bare.pools
    assert 1 <= shipped.launch_slots < shipped.worker_slots
