"""Benchmark 6: training throughput with emergency checkpointing (async) vs no checkpointing.

Both arms run the same 2-slice JobSet of the local JAX/Orbax workload (same seed, steps and model) through the
local runner; only the checkpointing flags differ. Runs are interleaved (A B, B A, ...) and the result is the
median over repeats of throughput(emergency) / throughput(none). Throughput is steps per second between the end
of step `warmup` and the end of the last step, read from the workload's own event files (so JAX start-up and
compilation are excluded; blocking save time and any slowdown from background saves are included), for every
process; a run's throughput is its slowest process's, which sets the step rate.

    python -m benchmarks.checkpoint_overhead            # the published run
    python -m benchmarks.checkpoint_overhead --quick    # smoke test
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterable, Mapping

from benchmarks.common import (
    NAMESPACE,
    argument_parser,
    interleaved,
    local_jobset,
    local_runner,
    median,
    print_table,
    ratio,
    result_path,
    wait_terminal,
    write_result,
)

NAME = "checkpoint_overhead"
GOAL = 0.90
ARMS = ("none", "emergency")
_counter = itertools.count()


def throughput(events: Iterable[Mapping[str, Any]], warmup: int, process: int = 0) -> dict[str, Any]:
    """Steps/s of one process from step `warmup` to its last step, plus the summed blocking save time.

    Only the last attempt's steps count (a run without faults has one attempt)."""
    steps = sorted(
        (float(e["ts"]), int(e["step"])) for e in events if e.get("event") == "step" and e.get("process") == process
    )
    marks = {step: ts for ts, step in steps}  # a step seen twice (after a restart) keeps its latest time
    if warmup not in marks or len(marks) < 2:
        raise ValueError(f"process {process} has no step {warmup} to start measuring from: {sorted(marks)[:5]}...")
    last = max(marks)
    if last <= warmup:
        raise ValueError(f"the run must be longer than warmup={warmup} steps (last step {last})")
    seconds = marks[last] - marks[warmup]
    # Where the time goes: inside the jitted step (the workload's own `seconds`) vs between steps (the
    # checkpoint manager's per-step coordination, blocking saves, preemption checks).
    inside = [float(e["seconds"]) for e in events if e.get("event") == "step" and e.get("process") == process
              and warmup < int(e["step"]) <= last and e.get("seconds") is not None]
    return {
        "steps": last - warmup,
        "seconds": seconds,
        "steps_per_s": (last - warmup) / seconds if seconds else None,
        "median_step_s": median(inside),
        "between_steps_s": max(0.0, seconds - sum(inside)) / (last - warmup),
    }


def checkpointing_spec(arm: str, run_name: str, bucket: Path, args: Any) -> Any:
    from mtc_provider.core.definition.description.spec import CheckpointingSpec

    if arm == "none":
        return CheckpointingSpec(run_name, str(bucket), args.steps, enable_checkpointing=False)
    return CheckpointingSpec(
        run_name,
        str(bucket),
        args.steps,
        enable_emergency_checkpoint=True,
        async_checkpointing=True,
        local_checkpoint_directory="/local",
        local_checkpoint_period=args.local_period,
        checkpoint_period=args.persistent_period,
    )


def run_once(api: Any, scratch: Path, arm: str, args: Any, step_time_ms: int) -> dict[str, Any]:
    from mtc_provider.adapters.workload_events import events_dir, read_events

    index = next(_counter)
    name = f"ov-{arm[:4]}-{index}"
    bucket = scratch / name
    spec = checkpointing_spec(arm, name, bucket, args)
    flags = {"seed": args.seed, "model_dim": args.model_dim, "global_batch_size": args.batch,
             "step_time_ms": step_time_ms}
    api.create(NAMESPACE, local_jobset(name, spec, flags, max_restarts=0))
    obj = wait_terminal(api, name, args.timeout)
    api.delete(NAMESPACE, name)
    events = read_events(events_dir(str(bucket), name))
    if obj["status"]["terminalState"] != "Completed" or not any(e["event"] == "finish" for e in events):
        raise RuntimeError(f"{arm} run {name} did not finish: {obj['status']}")
    return {"jobset": name, **slowest_process(events, args.warmup)}


def slowest_process(events: list[Mapping[str, Any]], warmup: int) -> dict[str, Any]:
    """Throughput of every process; the run's figures are the slowest process's (it sets the step rate: the
    others wait for it in the next collective). Replica 0 writes only persistent checkpoints, replica 1 the
    local ones, so each process pays a different share of the saving."""
    processes = sorted({int(e["process"]) for e in events if e.get("event") == "step" and "process" in e})
    if not processes:
        raise ValueError("no step events")
    per_process = {p: throughput(events, warmup, p) for p in processes}
    for p, measured in per_process.items():
        measured["saves"] = sum(1 for e in events if e.get("event") == "save_start" and e.get("process") == p)
    slowest = min(processes, key=lambda p: per_process[p]["steps_per_s"] or 0.0)
    return {**per_process[slowest], "slowest_process": slowest,
            "per_process": {str(p): measured for p, measured in per_process.items()}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5, help="steps excluded at the start (compilation)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--local-period", type=int, default=10, help="L: local_checkpoint_period")
    parser.add_argument("--persistent-period", type=int, default=50, help="P: checkpoint_period")
    parser.add_argument("--model-dim", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--step-time-ms", default="0,250",
                        help="comma list: extra simulated accelerator time per step (sleep; saves overlap it)")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.warmup, args.step_time_ms = 24, 1, 3, "0"
        args.local_period, args.persistent_period, args.model_dim = 4, 12, 128
    step_times = [int(x) for x in str(args.step_time_ms).split(",") if x.strip()]

    configs = []
    with local_runner("overhead") as (api, scratch):
        for step_time_ms in step_times:
            arms = {arm: (lambda arm=arm, t=step_time_ms: run_once(api, scratch, arm, args, t)) for arm in ARMS}
            configs.append(summarize(step_time_ms, interleaved(arms, args.repeats), args))
    result = {
        "quick": args.quick,
        "parameters": {k: v for k, v in vars(args).items() if k not in ("output", "quick")},
        "configs": configs,
        "median_ratio": {str(c["step_time_ms"]): c["median_ratio"] for c in configs},
        "goal": GOAL,
        "goal_met": {str(c["step_time_ms"]): c["goal_met"] for c in configs},
    }
    path = write_result(result_path(NAME, args.quick, args.output), NAME, result)
    print(f"result written to {path}")
    return result


def summarize(step_time_ms: int, runs: dict[str, list[dict[str, Any]]], args: Any) -> dict[str, Any]:
    pair_ratios = [ratio(e["steps_per_s"], n["steps_per_s"]) for e, n in zip(runs["emergency"], runs["none"])]
    median_ratio = median(pair_ratios)
    config = {
        "step_time_ms": step_time_ms,
        "runs": runs,
        "steps_per_s": {arm: median([r["steps_per_s"] for r in runs[arm]]) for arm in ARMS},
        "between_steps_s": {arm: median([r["between_steps_s"] for r in runs[arm]]) for arm in ARMS},
        "ratios": pair_ratios,
        "median_ratio": median_ratio,
        "goal_met": median_ratio is not None and median_ratio >= GOAL,
    }
    rows = [[f"repeat {i}", n["steps_per_s"], e["steps_per_s"], n["between_steps_s"], e["between_steps_s"], r]
            for i, (n, e, r) in enumerate(zip(runs["none"], runs["emergency"], pair_ratios))]
    rows.append(["median", config["steps_per_s"]["none"], config["steps_per_s"]["emergency"],
                 config["between_steps_s"]["none"], config["between_steps_s"]["emergency"], median_ratio])
    print_table(
        f"Checkpointing overhead: step_time_ms={step_time_ms}, L={args.local_period}, P={args.persistent_period},"
        f" {args.steps} steps (goal >= {GOAL:.0%}: {'met' if config['goal_met'] else 'MISSED'})",
        ["", "none steps/s", "emergency steps/s", "none s between", "emergency s between", "emergency / none"],
        rows,
    )
    return config


if __name__ == "__main__":
    main()
