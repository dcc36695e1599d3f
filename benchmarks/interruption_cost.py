"""Benchmark 10: the cost of one interruption, fault to the next training step, each way it can be handled.

The same host loss (`sigkill_host` of slice 1 at step `--fault-at`, after persistent and local saves) in the same
run, on the local target (the local runner's JobSet, pods as processes, the local API server), through the launch
operator, synchronous, in this process:

- ``in_cluster``: ``max_restarts`` 2. JobSet restarts every slice in the cluster (``failurePolicy.maxRestarts``);
  Airflow and the operator do nothing but watch. The nodes, image and ramdisks stay (layer 1).
- ``operator``: ``max_restarts`` 0. The JobSet fails; the operator's watch ends the attempt (the attempt made
  progress, so it is followed in the same try: core.attempt.resubmission), deletes it and submits attempt 2, whose new pods
  restore (layer 2). This is the path a graceful interruption without an in-cluster rule, or any end of an attempt,
  takes through Airflow's worker; an Airflow *retry* (a new try, when an attempt ends without progress) adds the
  scheduler's legs on top, which benchmark 2 (``resubmission_e2e``) times.

Arms alternate (ABAB...), each with its own runner home. The cost of an interruption is the time from the fault
(the runner's fault record) to the first ``step`` event of process 0 after it (the workload's own clock, the same
machine), and its parts: fault to the new pods' ``start`` event, and ``start`` to that step (start-up, restore, the
first step). The ratio operator / in_cluster of the medians comes from one run.

    python -m benchmarks.interruption_cost [--quick] [--repeats N] [--workload light|jax]
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from benchmarks.common import (NAMESPACE, REPO, argument_parser, interleaved, median, print_table, ratio,
                               result_path, write_result)

NAME = "interruption_cost"
ARMS = {"in_cluster": 2, "operator": 0}  # arm -> workload.max_restarts
WORKLOADS = {"light": ["python3", "-m", "mtc_local.light_workload"], "jax": ["python3", "-m", "mtc_local.workload"]}


def first_step_after(events: Sequence[Mapping[str, Any]], at: float) -> dict[str, Any]:
    """The fault's cost from process 0's events: the first `start` and the first `step` after `at` (unix s).

    Raises ValueError when no step follows the fault (the run did not recover: no cost to report)."""
    mine = sorted((e for e in events if e.get("process") == 0 and float(e["ts"]) > at), key=lambda e: e["ts"])
    start = next((e for e in mine if e["event"] == "start"), None)
    step = next((e for e in mine if e["event"] == "step" and (start is None or e["ts"] > start["ts"])), None)
    if start is None or step is None:
        raise ValueError(f"no start and step of process 0 after the fault at {at:.3f} ({len(mine)} events after it)")
    restore = next((e for e in mine if e["event"] == "restore" and e["ts"] > start["ts"]), None)
    return {"fault_to_step_s": round(step["ts"] - at, 3), "fault_to_start_s": round(start["ts"] - at, 3),
            "start_to_step_s": round(step["ts"] - start["ts"], 3), "next_step": step["step"],
            "restored_step": restore["step"] if restore else None,
            "restored_from": restore.get("tier") if restore else None}


def run_arm(scratch: Path, arm: str, index: int, args: Any) -> dict[str, Any]:
    """One run of `arm` with the fault; its cost, attempts and restarts."""
    from mtc_local.cluster.client import LocalCluster
    from mtc_local.cluster.lifecycle import stop
    from mtc_provider.adapters.workload_events import events_dir, read_events
    from mtc_provider.operators.jobset import MtcJobSetOperator
    from tests.support.js_helpers import FakeTI

    home, bucket, run = scratch / f"home-{arm}-{index}", scratch / f"bucket-{arm}-{index}", f"ic-{index}"
    operator = MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(home)},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run, "base_output_directory": str(bucket), "steps": args.steps,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 2, "checkpoint_period": 5, "enable_autocheckpoint": True},
        workload={"jobset_name": run, "image": "local", "command": WORKLOADS[args.workload],
                  "extra_flags": {"seed": args.seed or 7, "step_time_ms": args.step_time_ms},
                  "max_restarts": ARMS[arm], "termination_grace_period_seconds": 15},
        deferrable=False, poll_interval=0.2, retries=2, crash_loop_attempts=2,
        fault_plan=[{"kind": "sigkill_host", "at_step": args.fault_at, "slice": 1, "host": 0}])
    ti = FakeTI(run_id=f"{arm}-{index}", max_tries=3)
    started = time.time()
    try:
        result = operator.execute({"ti": ti})
        (fault,) = LocalCluster(str(home)).run_faults(NAMESPACE, run)
        cost = first_step_after(read_events(events_dir(str(bucket), run)), float(fault["ts"]))
    finally:
        stop(home)
    attempts = ti.xcoms.get("attempts") or []
    return {"arm": arm, "wall_s": round(time.time() - started, 1), "last_step": result["last_step"],
            "attempts": len(attempts), "in_cluster_restarts": sum(int(a.get("restarts") or 0) for a in attempts),
            **cost}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import shutil
    import tempfile

    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each arm (alternated)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="light",
                        help="light: no JAX (orchestration and restore on disk); jax: the JAX workload (start-up too)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--fault-at", type=int, default=12, help="the step of the host loss")
    parser.add_argument("--step-time-ms", type=int, default=150)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps, args.fault_at = 1, 20, 8
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    scratch = Path(tempfile.mkdtemp(prefix="mtc-bench-interruption-"))
    counter = {"in_cluster": 0, "operator": 0}

    def arm_runner(arm: str):
        def run() -> dict[str, Any]:
            counter[arm] += 1
            return run_arm(scratch, arm, counter[arm], args)
        return run

    try:
        runs = interleaved({arm: arm_runner(arm) for arm in ARMS}, args.repeats)
    finally:
        if not os.environ.get("MTC_BENCH_KEEP"):
            shutil.rmtree(scratch, ignore_errors=True)
    summary = {arm: {key: median([r[key] for r in results]) for key in
                     ("fault_to_step_s", "fault_to_start_s", "start_to_step_s")} for arm, results in runs.items()}
    result = {"workload": args.workload, "steps": args.steps, "fault_at": args.fault_at,
              "step_time_ms": args.step_time_ms, "repeats": args.repeats, "load_average_at_start": load_at_start,
              "runs": runs, "median": summary,
              "ratio_operator_over_in_cluster": ratio(summary["operator"]["fault_to_step_s"],
                                                      summary["in_cluster"]["fault_to_step_s"])}
    path = write_result(result_path(NAME, args.quick, args.output), NAME, result)
    print_table("one interruption (host loss), fault to next step, medians (s)",
                ["arm", "fault->step", "fault->start", "start->step", "runs"],
                [[arm, s["fault_to_step_s"], s["fault_to_start_s"], s["start_to_step_s"], len(runs[arm])]
                 for arm, s in summary.items()])
    print(f"ratio operator / in_cluster: {result['ratio_operator_over_in_cluster']}; result in {path}")
    return result


if __name__ == "__main__":
    main()
