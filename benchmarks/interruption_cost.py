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

With ``--compare next_attempt`` (issue 43) the fault is a graceful preemption after progress instead
(``sigterm_slice`` on both slices: the workload saves and exits 0, the JobSet completes below its target, as
MaxText's does), and the launch operator is deferrable, its trigger run in this process with a task instance, as
the triggerer runs it; the two arms are the two ways the next attempt of the same try is submitted:

- ``worker``: ``next_attempt_in_trigger=False``. The trigger's event resumes the task (``execute_complete``, here in
  this process), which closes attempt 1, deletes it, submits attempt 2 and defers again.
- ``trigger``: ``next_attempt_in_trigger=True``. The trigger closes attempt 1, creates attempt 2 and follows it
  (triggers.next_in_try); ``execute_complete`` runs once, at the try's end.

With ``--compare graceful`` (issue 43) the fault is the same graceful preemption after progress, and the arms are
who brings it back (``workload.graceful_preemption``; both deferrable, the next attempt from the trigger, the
default):

- ``operator``: ``operator``. The workload exits 0, the JobSet completes below its target, and the trigger closes
  attempt 1 and creates attempt 2 (the ``trigger`` arm above).
- ``in_cluster``: ``in_cluster``. The wrapper (core.definition.render.graceful_exit) ends the container with 143, the pods
  fail with the ``DisruptionTarget`` condition and JobSet's ``RestartOnDisruption`` rule recreates every slice in
  the same attempt, not counted against ``maxRestarts``; the trigger only watches.

The ``worker`` arm here leaves out what Airflow adds between the event and ``execute_complete`` (the scheduler's
pick-up, a free slot, the task process's fork and imports: benchmark 2 times them), so its
figure is a lower bound of the worker path and the ratio trigger / worker an upper bound. Reported also: fault to
attempt 2's JobSet created (its record's ``start``).

Arms alternate (ABAB...), each with its own runner home. The cost of an interruption is the time from the fault
(the runner's fault record) to the first ``step`` event of process 0 after it (the workload's own clock, the same
machine), and its parts: fault to the new pods' ``start`` event, and ``start`` to that step (start-up, restore, the
first step). The ratio operator / in_cluster of the medians comes from one run.

    python -m benchmarks.interruption_cost [--quick] [--repeats N] [--workload light|jax] \
        [--compare restart|next_attempt]
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
NEXT_ATTEMPT_ARMS = {"worker": False, "trigger": True}  # arm -> next_attempt_in_trigger
GRACEFUL_ARMS = {"operator": "operator", "in_cluster": "in_cluster"}  # arm -> workload.graceful_preemption
COMPARISONS = {"restart": (ARMS, "operator", "in_cluster"), "next_attempt": (NEXT_ATTEMPT_ARMS, "trigger", "worker"),
               "graceful": (GRACEFUL_ARMS, "operator", "in_cluster")}
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
    in_try, graceful = args.compare in ("next_attempt", "graceful"), {}
    if in_try:  # a graceful preemption of every slice after progress
        faults = [{"kind": "sigterm_slice", "at_step": args.fault_at, "slice": slice_index} for slice_index in (0, 1)]
        if args.compare == "graceful":
            options = {"deferrable": True, "next_attempt_in_trigger": True}
            graceful = {"graceful_preemption": GRACEFUL_ARMS[arm]}
        else:
            options = {"deferrable": True, "next_attempt_in_trigger": NEXT_ATTEMPT_ARMS[arm]}
    else:
        faults = [{"kind": "sigkill_host", "at_step": args.fault_at, "slice": 1, "host": 0}]
        options = {"deferrable": False}
    operator = MtcJobSetOperator(
        task_id="train", target={"kind": "local", "home": str(home)},
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2},
        checkpointing={"run_name": run, "base_output_directory": str(bucket), "steps": args.steps,
                       "enable_emergency_checkpoint": True, "local_checkpoint_directory": "/local",
                       "local_checkpoint_period": 2, "checkpoint_period": 5, "enable_autocheckpoint": True},
        workload={"jobset_name": run, "image": "local", "command": WORKLOADS[args.workload],
                  "extra_flags": {"seed": args.seed or 7, "step_time_ms": args.step_time_ms},
                  "max_restarts": ARMS[arm] if args.compare == "restart" else 3,
                  "termination_grace_period_seconds": 15, **graceful},
        poll_interval=0.2, retries=2, crash_loop_attempts=2, fault_plan=faults, **options)
    ti = FakeTI(run_id=f"{arm}-{index}", max_tries=3)
    started = time.time()
    try:
        result = deferred_try(operator, ti) if in_try else operator.execute({"ti": ti})
        fault_ts = min(float(f["ts"]) for f in LocalCluster(str(home)).run_faults(NAMESPACE, run))
        cost = first_step_after(read_events(events_dir(str(bucket), run)), fault_ts)
    finally:
        stop(home)
    attempts = ti.xcoms.get("attempts") or []
    created = [a["start"] for a in attempts if a.get("attempt") == 2 and a.get("start") is not None]
    return {"arm": arm, "wall_s": round(time.time() - started, 1), "last_step": result["last_step"],
            "attempts": len(attempts), "in_cluster_restarts": sum(int(a.get("restarts") or 0) for a in attempts),
            "tries": sorted({a.get("try") for a in attempts}), "resumed_on_worker": result.get("_resumes"),
            "fault_to_next_jobset_s": round(created[0] - fault_ts, 3) if created else None, **cost}


class _TriggererComms:
    """The triggerer's comms as a trigger sees them (`task_runner.SUPERVISOR_COMMS`): the XComs it sends."""

    def __init__(self) -> None:
        self.xcoms: dict[str, Any] = {}

    async def asend(self, message: Any) -> None:
        self.xcoms[message.key] = message.value


def deferred_try(operator: Any, ti: Any, most: int = 10) -> dict[str, Any]:
    """One deferrable try in this process: each deferral's trigger run to its event with the task instance (as the
    triggerer runs it, XComs through its comms), then `execute_complete` (the worker's resume), until the try ends.
    The result carries `_resumes`: how many times the worker was resumed."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred
    from airflow.sdk.execution_time import task_runner

    async def first_event(trigger: Any) -> Any:
        async for event in trigger.run():
            return event
        raise RuntimeError("the trigger ended without an event")

    def in_triggerer(trigger: Any) -> Any:  # the comms only while the trigger runs: the worker has its own
        saved = getattr(task_runner, "SUPERVISOR_COMMS", None)
        task_runner.SUPERVISOR_COMMS = _TriggererComms()
        try:
            return asyncio.run(first_event(trigger))
        finally:
            task_runner.SUPERVISOR_COMMS = saved

    context = {"ti": ti, "run_id": ti.run_id}
    try:
        return {**operator.execute(context), "_resumes": 0}
    except TaskDeferred as deferral:
        pending = deferral
    for resumes in range(1, most + 1):
        trigger = pending.trigger
        trigger.task_instance = ti
        event = in_triggerer(trigger)
        try:
            return {**getattr(operator, pending.method_name)(context, event.payload), "_resumes": resumes}
        except TaskDeferred as deferral:
            pending = deferral
    raise RuntimeError(f"the try deferred more than {most} times")


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
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="restart",
                        help="restart: a host loss, in-cluster restart vs the operator's new attempt; next_attempt: a "
                             "graceful preemption after progress, the next attempt from the worker vs the trigger; "
                             "graceful: that preemption restarted in the cluster vs the operator's next attempt")
    args = parser.parse_args(argv)
    arms, ours, base = COMPARISONS[args.compare]
    if args.quick:
        args.repeats, args.steps, args.fault_at = 1, 20, 8
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    scratch = Path(tempfile.mkdtemp(prefix="mtc-bench-interruption-"))
    counter = dict.fromkeys(arms, 0)

    def arm_runner(arm: str):
        def run() -> dict[str, Any]:
            counter[arm] += 1
            return run_arm(scratch, arm, counter[arm], args)
        return run

    try:
        runs = interleaved({arm: arm_runner(arm) for arm in arms}, args.repeats)
    finally:
        if not os.environ.get("MTC_BENCH_KEEP"):
            shutil.rmtree(scratch, ignore_errors=True)
    summary = {arm: {key: median([r[key] for r in results]) for key in
                     ("fault_to_step_s", "fault_to_start_s", "start_to_step_s", "fault_to_next_jobset_s")}
               for arm, results in runs.items()}
    result = {"compare": args.compare, "workload": args.workload, "steps": args.steps, "fault_at": args.fault_at,
              "step_time_ms": args.step_time_ms, "repeats": args.repeats, "load_average_at_start": load_at_start,
              "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "runs": runs, "median": summary,
              f"ratio_{ours}_over_{base}": ratio(summary[ours]["fault_to_step_s"], summary[base]["fault_to_step_s"])}
    if args.compare == "next_attempt":  # the in-cluster arm creates no JobSet: no such ratio for `graceful`
        result[f"ratio_{ours}_over_{base}_next_jobset"] = ratio(summary[ours]["fault_to_next_jobset_s"],
                                                                summary[base]["fault_to_next_jobset_s"])
    name = NAME if args.compare == "restart" else f"{NAME}_{args.compare}"
    path = write_result(result_path(name, args.quick, args.output), name, result)
    fault = "host loss" if args.compare == "restart" else "graceful preemption after progress"
    print_table(f"one interruption ({fault}), medians (s)",
                ["arm", "fault->step", "fault->start", "start->step", "fault->next JobSet", "runs"],
                [[arm, s["fault_to_step_s"], s["fault_to_start_s"], s["start_to_step_s"], s["fault_to_next_jobset_s"],
                  len(runs[arm])] for arm, s in summary.items()])
    ratios = "; ".join(f"{key[len('ratio_'):].replace('_over_', ' / ')}: {value}" for key, value in result.items()
                       if key.startswith("ratio_"))
    print(f"{ratios}; result in {path}")
    return result


if __name__ == "__main__":
    main()
