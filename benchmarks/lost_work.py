"""Benchmark 1: lost work and recovery, emergency checkpointing (local period L, persistent period P) vs
persistent-only checkpointing (P), on the local target with the same seed and the same fault plan.

Each arm trains one run (same run_name across attempts) as a 2-slice JobSet through the local runner. Hard faults
restart the JobSet in the cluster (failurePolicy.maxRestarts); a SIGTERM preemption makes the workload save
(enable_autocheckpoint) and exit 0, so the JobSet ends Completed below the target step and the benchmark
resubmits a new attempt JobSet at once, as the launch operator's retry would. Per fault, from the workload's
event files: steps lost (last step of the disrupted attempt minus the step restored from), kill-to-first-new-step
time, time to regain the pre-fault step, restore tier and restore time; per arm: goodput (core.view.goodput) and
total wall time; then ratios emergency / persistent-only.

    python -m benchmarks.lost_work            # the published run
    python -m benchmarks.lost_work --model-dim 1024 ...   # a larger state (see docs/benchmarks.md)

The persistent tier pays a GCS-like cost (local/bucket_cost.py: per-object latency, per-host bandwidth) unless
--no-bucket-cost: on this machine the "bucket" is page-cached local disk, cheaper than any real bucket.
    python -m benchmarks.lost_work --quick    # smoke test (one SIGKILL)
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from benchmarks.common import (
    NAMESPACE,
    argument_parser,
    local_jobset,
    local_runner,
    print_table,
    ratio,
    result_path,
    wait_terminal,
    write_result,
)

NAME = "lost_work"
ARMS = ("emergency", "persistent")
HARD_KINDS = ("sigkill_host", "wipe_ramdisk", "kill_slice")
# Slice 1 holds the local copies (Orbax: replica 0 writes persistent only), so wiping it forces the fallback
# to the persistent tier; killing slice 0 shows the local tier restore.
DEFAULT_FAULTS = [
    {"kind": "sigkill_host", "at_step": 17, "slice": 0, "host": 0},
    {"kind": "wipe_ramdisk", "at_step": 34, "slice": 1, "host": 0},
    {"kind": "sigterm_slice", "at_step": 46, "slice": 1},
]
QUICK_FAULTS = [{"kind": "sigkill_host", "at_step": 13, "slice": 0, "host": 0}]


# ---- analysis (pure: events and fault records in, numbers out) ---------------------------------------------
def fault_outcomes(events: Sequence[Mapping[str, Any]], faults: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per fired fault (`ts` = when the runner injected it), from the workload's merged event stream."""
    events = sorted(events, key=lambda e: float(e["ts"]))
    starts = [float(e["ts"]) for e in events if e["event"] == "start"]
    rows = []
    for fault in sorted(faults, key=lambda f: float(f["ts"])):
        t_fault = float(fault["ts"])
        prev_start = max((t for t in starts if t <= t_fault), default=float("-inf"))
        next_start = min((t for t in starts if t > t_fault), default=None)
        end = next_start if next_start is not None else float("inf")
        steps_before = [int(e["step"]) for e in events
                        if e["event"] == "step" and prev_start < float(e["ts"]) <= t_fault]
        steps_attempt = [int(e["step"]) for e in events if e["event"] == "step" and prev_start < float(e["ts"]) < end]
        preempted = [e for e in events if e["event"] == "preempted" and prev_start < float(e["ts"]) < end]
        row: dict[str, Any] = {
            "kind": fault["kind"],
            "at_step": fault.get("at_step"),
            "slice": fault.get("slice"),
            "host": fault.get("host"),
            "last_step_before_fault": max(steps_before, default=0),
            "last_step_of_attempt": max(steps_attempt, default=0),
            "preemption_saved": any(e.get("saved") for e in preempted) if preempted else None,
            "restored_step": None,
            "restore_tier": None,
            "restore_s": None,
            "steps_lost": None,
            "kill_to_first_new_step_s": None,
            "time_to_regain_s": None,
        }
        if next_start is not None:
            after = [e for e in events if float(e["ts"]) >= next_start]
            first_step = next((e for e in after if e["event"] == "step"), None)
            cutoff = float(first_step["ts"]) if first_step else float("inf")
            restores = [e for e in after if e["event"] == "restore" and float(e["ts"]) <= cutoff]
            restored = max((int(e["step"]) for e in restores), default=0)  # no restore event: started over
            row.update(
                restored_step=restored,
                restore_tier=restores[0].get("tier") if restores else "none",
                restore_s=max((float(e.get("duration_s") or 0.0) for e in restores), default=None),
                # the emergency manager's split (Orbax's own step statistics): the restoring slice's read, and
                # the cross-slice broadcast every process takes part in
                restore_read_s=max((float(e["read_s"]) for e in restores if e.get("read_s") is not None),
                                   default=None),
                restore_broadcast_s=max((float(e["broadcast_s"]) for e in restores
                                         if e.get("broadcast_s") is not None), default=None),
                steps_lost=max(0, row["last_step_of_attempt"] - restored),
            )
            if first_step is not None:
                row["kill_to_first_new_step_s"] = float(first_step["ts"]) - t_fault
            regained = next((e for e in after if e["event"] == "step"
                             and int(e["step"]) >= row["last_step_of_attempt"]), None)
            if regained is not None:
                row["time_to_regain_s"] = float(regained["ts"]) - t_fault
        rows.append(row)
    return rows


def arm_summary(events: Sequence[Mapping[str, Any]], outcomes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    from mtc_provider.core.view.goodput import compute_goodput, timeline_from_workload_events

    report = compute_goodput(timeline_from_workload_events(events))
    hard = [o for o in outcomes if o["kind"] in HARD_KINDS]
    finish = [e for e in events if e["event"] == "finish"]

    def total(rows: Iterable[Mapping[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return sum(values) if values else None

    return {
        "goodput": report.goodput,
        "goodput_report": report.to_payload(),
        "ideal_step_s": report.ideal_step_s,
        "steps_lost_total": total(outcomes, "steps_lost"),
        "steps_lost_hard_faults": total(hard, "steps_lost"),
        "kill_to_first_new_step_s_total": total(outcomes, "kill_to_first_new_step_s"),
        "time_to_regain_s_total": total(outcomes, "time_to_regain_s"),
        "finished_step": finish[-1]["step"] if finish else None,
        "params_sha256": finish[-1].get("params_sha256") if finish else None,
    }


# ---- running one arm ---------------------------------------------------------------------------------------
def checkpointing_spec(arm: str, run_name: str, bucket: Path, args: Any) -> Any:
    from mtc_provider.core.definition.description.spec import CheckpointingSpec

    emergency = arm == "emergency"
    return CheckpointingSpec(
        run_name,
        str(bucket),
        args.steps,
        enable_emergency_checkpoint=emergency,
        local_checkpoint_directory="/local" if emergency else "",
        local_checkpoint_period=args.local_period if emergency else 0,
        checkpoint_period=args.persistent_period,
        enable_autocheckpoint=True,
    )


def run_arm(api: Any, scratch: Path, arm: str, faults: list[dict[str, Any]], args: Any) -> dict[str, Any]:
    """Train to the target step through every fault; resubmit (new attempt JobSet) when an attempt ends early."""
    from mtc_provider.adapters.workload_events import events_dir, read_events

    run_name = f"lw-{arm}"
    bucket = scratch / arm
    spec = checkpointing_spec(arm, run_name, bucket, args)
    flags = {"seed": args.seed, "model_dim": args.model_dim, "global_batch_size": args.batch,
             "step_time_ms": args.step_time_ms}
    remaining = list(enumerate(faults))
    fired: list[dict[str, Any]] = []
    attempts = []
    t0 = time.time()
    for attempt in range(len(faults) + 2):
        name = f"{run_name}-a{attempt}"
        body = local_jobset(name, spec, flags, [f for _, f in remaining], max_restarts=len(faults) + 2)
        api.create(NAMESPACE, body)
        obj = wait_terminal(api, name, args.timeout)
        records = api.faults(NAMESPACE, name)
        for record in records:
            index = remaining[record["index"]][0]
            fired.append({**faults[index], "index": index, "ts": record["ts"], "runner_step": record.get("step"),
                          "jobset": name})
        done = {record["index"] for record in records}
        remaining = [item for i, item in enumerate(remaining) if i not in done]
        api.delete(NAMESPACE, name)  # as the operator does: ended attempts free their slices, checkpoints stay
        status = obj["status"]
        attempts.append({"jobset": name, "terminalState": status["terminalState"], "restarts": status["restarts"]})
        events = read_events(events_dir(str(bucket), run_name))
        if any(e["event"] == "finish" for e in events) or status["terminalState"] != "Completed":
            break  # finished, or failed for good (a bug exit code or maxRestarts): nothing to resubmit
    wall = time.time() - t0
    events = read_events(events_dir(str(bucket), run_name))
    outcomes = fault_outcomes(events, fired)
    return {"attempts": attempts, "wall_s": wall, "faults_fired": len(fired), "faults": outcomes,
            "checkpoint": checkpoint_size(Path(spec.checkpoint_directory)), **arm_summary(events, outcomes)}


def checkpoint_size(checkpoint_dir: Path) -> dict[str, int] | None:
    """Objects and bytes of the newest persistent step: the state both hosts hold (one host per slice)."""
    from mtc_local.bucket_cost import step_objects

    steps = sorted((int(p.name), p) for p in checkpoint_dir.glob("*") if p.name.isdigit())
    if not steps:
        return None
    objects, nbytes = step_objects(steps[-1][1])
    return {"step": steps[-1][0], "objects": objects, "bytes": nbytes}


def tmpfs_read_bandwidth(nbytes: int, repeats: int = 3) -> dict[str, float] | None:
    """Bytes/s of reading `nbytes` back from tmpfs (/dev/shm, where the local runner's ramdisks live), best of
    `repeats`: the physical limit of the local tier's read on this machine, measured in the same run."""
    import tempfile

    shm = Path("/dev/shm")
    if nbytes <= 0 or not shm.is_dir():
        return None
    chunk = os.urandom(1 << 20)
    with tempfile.NamedTemporaryFile(dir=shm, prefix="mtc-bench-bw-") as handle:
        written = 0
        while written < nbytes:
            written += handle.write(chunk[: min(len(chunk), nbytes - written)])
        handle.flush()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            with open(handle.name, "rb", buffering=0) as source:
                while source.read(1 << 24):
                    pass
            best = min(best, time.perf_counter() - start)
    return {"bytes": nbytes, "seconds": round(best, 4), "bytes_per_s": round(nbytes / best)}


def restore_split(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per local-tier restore of the emergency arm: the read against tmpfs's bandwidth, and read + broadcast
    against the modelled bucket's restore of the same state (what the persistent tier would cost per host)."""
    from mtc_local.bucket_cost import BucketCost

    params, arm = result["parameters"], result["arms"]["emergency"]
    size, limit = arm.get("checkpoint") or {}, result.get("tmpfs_read") or {}
    bucket = BucketCost(params["bucket_latency_ms"] / 1000.0, params["bucket_mb_per_s"] * 1e6)
    rows = []
    for fault in arm["faults"]:
        if fault.get("restore_tier") != "local":
            continue
        nbytes, objects = size.get("bytes") or 0, size.get("objects") or 0
        tmpfs_s = nbytes / limit["bytes_per_s"] if limit.get("bytes_per_s") and nbytes else None
        rows.append({"fault": f"{fault['kind']}@{fault['at_step']}", "bytes_per_host": nbytes,
                     "restore_s": fault.get("restore_s"), "read_s": fault.get("restore_read_s"),
                     "tmpfs_read_s": round(tmpfs_s, 4) if tmpfs_s is not None else None,
                     "read_over_tmpfs": ratio(fault.get("restore_read_s"), tmpfs_s),
                     "broadcast_s": fault.get("restore_broadcast_s"),
                     "modelled_bucket_s": round(bucket.seconds(objects, nbytes), 4) if nbytes else None})
    return rows


def same_cost_goodput(arms: Mapping[str, Mapping[str, Any]], steps: int) -> dict[str, float | None]:
    """steps x one common ideal step time / wall time: core.view.goodput credits each arm with its own median step
    time, and the emergency manager's per-step coordination makes its steps slower, which would count as
    "productive" there. With one step cost for both arms the ratio is the inverse ratio of wall times."""
    ideals = [a["ideal_step_s"] for a in arms.values() if a.get("ideal_step_s")]
    common = min(ideals) if ideals else None
    return {name: (steps * common / a["wall_s"] if common and a["wall_s"] else None) for name, a in arms.items()}


def compare(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    e, p = arms["emergency"], arms["persistent"]
    per_fault = [
        {"kind": fe["kind"], "steps_lost": ratio(fe["steps_lost"], fp["steps_lost"]),
         "kill_to_first_new_step_s": ratio(fe["kill_to_first_new_step_s"], fp["kill_to_first_new_step_s"]),
         "time_to_regain_s": ratio(fe["time_to_regain_s"], fp["time_to_regain_s"])}
        for fe, fp in zip(e["faults"], p["faults"])
    ]
    return {
        "steps_lost_hard_faults": ratio(e["steps_lost_hard_faults"], p["steps_lost_hard_faults"]),
        "steps_lost_total": ratio(e["steps_lost_total"], p["steps_lost_total"]),
        "time_to_regain_s_total": ratio(e["time_to_regain_s_total"], p["time_to_regain_s_total"]),
        "goodput": ratio(e["goodput"], p["goodput"]),
        "goodput_same_step_cost": ratio(e["goodput_same_step_cost"], p["goodput_same_step_cost"]),
        "wall_s": ratio(e["wall_s"], p["wall_s"]),
        "per_fault": per_fault,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--local-period", type=int, default=2, help="L: local_checkpoint_period")
    parser.add_argument("--persistent-period", type=int, default=10, help="P: checkpoint_period")
    parser.add_argument("--model-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--step-time-ms", type=int, default=100, help="simulated accelerator time per step")
    parser.add_argument("--faults", help="JSON fault plan (list of {kind, at_step, slice, host})")
    parser.add_argument("--timeout", type=float, default=400, help="seconds per attempt")
    parser.add_argument("--bucket-latency-ms", type=float, default=50.0, help="persistent tier: per-object latency")
    parser.add_argument("--bucket-mb-per-s", type=float, default=200.0, help="persistent tier: per-host MB/s")
    parser.add_argument("--no-bucket-cost", action="store_true", help="the plain local directory as the bucket")
    args = parser.parse_args(argv)
    from mtc_local import bucket_cost

    for variable in (bucket_cost.LATENCY_ENV, bucket_cost.BANDWIDTH_ENV):
        os.environ.pop(variable, None)
    if not args.no_bucket_cost:  # the runner's pods inherit this environment
        os.environ[bucket_cost.LATENCY_ENV] = str(args.bucket_latency_ms)
        os.environ[bucket_cost.BANDWIDTH_ENV] = str(args.bucket_mb_per_s)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    faults = json.loads(args.faults) if args.faults else DEFAULT_FAULTS
    if args.quick:
        args.steps, args.local_period, args.persistent_period = 16, 2, 8
        faults = json.loads(args.faults) if args.faults else QUICK_FAULTS

    arms: dict[str, Any] = {}
    with local_runner("lostwork") as (api, scratch):
        for arm in ARMS:
            arms[arm] = run_arm(api, scratch, arm, faults, args)
    newest = (arms["emergency"].get("checkpoint") or {}).get("bytes") or 0
    tmpfs_read = tmpfs_read_bandwidth(newest)  # the same run, after the arms: the machine as they saw it
    for arm, value in same_cost_goodput(arms, args.steps).items():
        arms[arm]["goodput_same_step_cost"] = value
    result = {
        "quick": args.quick,
        "parameters": {**{k: v for k, v in vars(args).items() if k not in ("output", "quick", "faults")},
                       "faults": faults},
        "expected_lost_ratio": args.local_period / args.persistent_period,
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "tmpfs_read": tmpfs_read,
        "arms": arms,
        "ratios": compare(arms),
        "same_final_params": arms["emergency"]["params_sha256"] is not None
        and arms["emergency"]["params_sha256"] == arms["persistent"]["params_sha256"],
    }
    result["restore_split"] = restore_split(result)
    report(result)
    path = write_result(result_path(NAME, args.quick, args.output), NAME, result)
    print(f"result written to {path}")
    return result


def report(result: Mapping[str, Any]) -> None:
    arms, ratios = result["arms"], result["ratios"]
    columns = ["fault", "arm", "last step", "restored", "tier", "restore s", "steps lost", "kill to new step s",
               "kill to regained s"]
    rows = []
    for index, per_fault in enumerate(ratios["per_fault"]):
        for arm in ARMS:
            o = arms[arm]["faults"][index]
            rows.append([f"{index}: {o['kind']}@{o['at_step']}", arm, o["last_step_of_attempt"], o["restored_step"],
                         o["restore_tier"], o["restore_s"], o["steps_lost"], o["kill_to_first_new_step_s"],
                         o["time_to_regain_s"]])
        rows.append(["", "ratio e/p", "", "", "", "", per_fault["steps_lost"], per_fault["kill_to_first_new_step_s"],
                     per_fault["time_to_regain_s"]])
    print_table("Lost work per fault (emergency vs persistent-only)", columns, rows)
    print_table(
        f"Overall (expected lost-work ratio ~ L/P = {result['expected_lost_ratio']:.2f})",
        ["", "emergency", "persistent", "emergency / persistent"],
        [
            ["steps lost (hard faults)", arms["emergency"]["steps_lost_hard_faults"],
             arms["persistent"]["steps_lost_hard_faults"], ratios["steps_lost_hard_faults"]],
            ["steps lost (all)", arms["emergency"]["steps_lost_total"], arms["persistent"]["steps_lost_total"],
             ratios["steps_lost_total"]],
            ["time to regain (s)", arms["emergency"]["time_to_regain_s_total"],
             arms["persistent"]["time_to_regain_s_total"], ratios["time_to_regain_s_total"]],
            ["goodput (core.view.goodput)", arms["emergency"]["goodput"], arms["persistent"]["goodput"], ratios["goodput"]],
            ["goodput (same step cost)", arms["emergency"]["goodput_same_step_cost"],
             arms["persistent"]["goodput_same_step_cost"], ratios["goodput_same_step_cost"]],
            ["median step (s)", arms["emergency"]["ideal_step_s"], arms["persistent"]["ideal_step_s"],
             ratio(arms["emergency"]["ideal_step_s"], arms["persistent"]["ideal_step_s"])],
            ["total time (s)", arms["emergency"]["wall_s"], arms["persistent"]["wall_s"], ratios["wall_s"]],
        ],
    )
    print(f"same final parameters in both arms: {result['same_final_params']}")
    split = result.get("restore_split") or []
    if split:
        print_table("Local-tier restore split (emergency arm) against its physical limits, same run (s)",
                    ["fault", "bytes/host", "restore", "read", "tmpfs read limit", "read / limit", "broadcast",
                     "modelled bucket"],
                    [[r["fault"], r["bytes_per_host"], r["restore_s"], r["read_s"], r["tmpfs_read_s"],
                      r["read_over_tmpfs"], r["broadcast_s"], r["modelled_bucket_s"]] for r in split])


if __name__ == "__main__":
    main()
