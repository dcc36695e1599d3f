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


class PoolsApi:
    """Airflow 3.3's `PATCH /api/v2/pools/{name}` as its service checks it
    (airflow/api_fastapi/core_api/services/public/pools.py, `update_orm_from_pydantic`): the default pool takes a
    patch only with an `update_mask` of `slots`/`include_deferred`, else HTTP 400 "Only slots and included_deferred
    can be modified on Default Pool" (the 50-run comparison arm's set-up failed on it); any other pool's body must
    validate as a whole `BasePool` (its name and include_deferred given), else HTTP 422 (the 20-run one did)."""

    def __init__(self) -> None:
        self.pools = {"default_pool": 4, "mtc_launch": 2}

    def api(self, method: str, path: str, json: dict | None = None) -> dict:
        if method == "GET":
            return {"pools": [{"name": name, "slots": slots} for name, slots in self.pools.items()]}
        name, _, query = path.removeprefix("/pools/").partition("?")
        mask = [part.removeprefix("update_mask=") for part in query.split("&") if part.startswith("update_mask=")]
        if name == "default_pool" and not (mask and set(mask) <= {"slots", "include_deferred"}):
            raise RuntimeError(f"PATCH {path} -> 400: Only slots and included_deferred can be modified on Default Pool")
        if name != "default_pool" and not {"name", "slots", "include_deferred"} <= set(json):
            raise RuntimeError(f"PATCH {path} -> 422: pool and include_deferred: Field required")
        self.pools[name] = json["slots"]
        return {}


def test_the_comparison_arm_unbounds_both_pools_through_airflows_api():
    arm = ARMS["topology_no_pools"].__new__(ARMS["topology_no_pools"])
    arm.topo = PoolsApi()
    arm.size_pools()
    assert arm.pool_slots == {"default_pool": 128, "mtc_launch": 128}
