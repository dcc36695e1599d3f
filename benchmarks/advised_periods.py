"""Benchmark 7: checkpoint periods from the advisor vs the sample DAG's guide-style defaults, under the same
seeded fault process, on the local target.

Faults arrive as Poisson processes in wall time (exponential gaps, drawn from a seed): host losses (SIGKILL of a
random slice's host; the local tier covers them) and slice losses (slice 1's ramdisk wiped, then its host killed:
slice 1 holds the only local copies, so the run falls back to the persistent tier). Each run is one 2-slice JobSet
through the local runner; every fault restarts it in the cluster (failurePolicy.maxRestarts).

1. Calibration: one run with the default periods and two faults at fixed steps (a host loss, then a slice loss),
   the "earlier run of the same run_name". `core.view.advisor.measure_events` reads step time, blocking save costs,
   restore (both tiers), restart and start-up times from its events; with the injected failure rates (given, as a
   user gives a fleet's MTBF) `core.view.advisor.advise` picks (L, P).
2. The runs, interleaved: default and advised, seeds 0..n-1 (same seed = same fault times in both arms).
3. Goodput of a run = steps x the calibrated step time / wall time, from the end of the first step to the finish:
   the quantity the model predicts for a run without its one-time start-up (JAX start-up takes 10-45 s here
   depending on load and does not depend on the periods; it is left out of both the measurement and the model). Per arm: mean measured goodput; the model's prediction from the calibration figures at the injected
   rates (what the advisor foresaw), and its error; the model on the figures and failure counts re-measured in
   the arm's own runs (the model itself, apart from the calibration's foresight), and its error.

    python -m benchmarks.advised_periods            # the published run (8-25 minutes, by load)
    python -m benchmarks.advised_periods --quick    # smoke test (one seed, 40 steps)
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

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

NAME = "advised_periods"
ARMS = ("default", "advised")


# ---- pure parts ----------------------------------------------------------------------------------------------
def poisson_fault_plan(seed: int, host_loss_rate: float, slice_loss_rate: float, horizon_s: float,
                       num_slices: int = 2) -> list[dict[str, Any]]:
    """Fault times (seconds from the JobSet's creation) of two independent Poisson processes up to the horizon."""
    rng = random.Random(seed)
    plan = []
    for kind, rate in (("host_loss", host_loss_rate), ("slice_loss", slice_loss_rate)):
        t = 0.0
        while rate > 0:
            t += rng.expovariate(rate)
            if t > horizon_s:
                break
            if kind == "host_loss":
                plan.append({"kind": "sigkill_host", "at_seconds": round(t, 3), "slice": rng.randrange(num_slices),
                             "host": 0})
            else:
                plan.append({"kind": "wipe_ramdisk", "at_seconds": round(t, 3), "slice": 1, "host": 0})
    return sorted(plan, key=lambda f: f["at_seconds"])


def run_order(seeds: int) -> list[tuple[str, int]]:
    """Both arms for each seed, alternating which arm goes first so drift hits both alike."""
    order = []
    for seed in range(seeds):
        order += [("advised", seed), ("default", seed)] if seed % 2 else [("default", seed), ("advised", seed)]
    return order


def calibration_faults(steps: int) -> list[dict[str, Any]]:
    """A host loss at a third of the run, a slice loss (slice 1 holds the local copies) at two thirds."""
    return [{"kind": "sigkill_host", "at_step": steps // 3, "slice": 0, "host": 0},
            {"kind": "wipe_ramdisk", "at_step": 2 * steps // 3, "slice": 1, "host": 0}]


def summarize(runs: Sequence[Mapping[str, Any]], predicted: Mapping[str, float]) -> dict[str, Any]:
    """Mean measured goodput per arm, the ratio advised/default, per-seed ratios and the model's relative error."""
    arms: dict[str, Any] = {}
    for arm in ARMS:
        values = [r["goodput"] for r in runs if r["arm"] == arm and r["goodput"] is not None]
        mean = statistics.fmean(values) if values else None
        arms[arm] = {"mean_goodput": mean, "stdev": statistics.stdev(values) if len(values) > 1 else None,
                     "runs": len(values), "predicted": predicted.get(arm),
                     "prediction_error": (predicted[arm] - mean) / mean if mean and arm in predicted else None}
    by_seed = {}
    for r in runs:
        by_seed.setdefault(r["seed"], {})[r["arm"]] = r["goodput"]
    per_seed = {seed: ratio(v.get("advised"), v.get("default")) for seed, v in sorted(by_seed.items())}
    return {"arms": arms, "ratio": ratio(arms["advised"]["mean_goodput"], arms["default"]["mean_goodput"]),
            "predicted_ratio": ratio(predicted.get("advised"), predicted.get("default")), "per_seed_ratio": per_seed}


def goodput_after_startup(events: Sequence[Mapping[str, Any]], step_s: float) -> float | None:
    """Steps after the first one x step_s / time from the end of the first step to the finish (one process)."""
    ids = [e["process"] for e in events if e.get("process") is not None]
    mine = sorted((e for e in events if e.get("process") == min(ids, default=None)), key=lambda e: float(e["ts"]))
    first = next((e for e in mine if e["event"] == "step"), None)
    finish = next((e for e in reversed(mine) if e["event"] == "finish"), None)
    if first is None or finish is None or float(finish["ts"]) <= float(first["ts"]):
        return None
    return (int(finish["step"]) - int(first["step"])) * step_s / (float(finish["ts"]) - float(first["ts"]))


def model_from_runs(measured: Sequence[Mapping[str, Any]], periods: Sequence[int], steps: int,
                    step_s: float) -> dict[str, Any]:
    """The model with the figures re-measured in an arm's own runs (median of each figure over the runs; failure
    rates = failures / exposure, pooled): its expected wall time, and goodput on the common step time `step_s`.
    This checks the model itself, apart from how well one calibration run foresaw the arm's conditions."""
    from mtc_provider.core.view.advisor import Costs, FailureRates, expected_goodput

    def pooled(name: str) -> float | None:
        values = [m[name] for m in measured if m.get(name) is not None]
        return statistics.median(values) if values else None

    figures = {name: pooled(name) for name in ("step_s", "save_local_s", "save_persistent_s", "restore_local_s",
                                                "restore_persistent_s", "restart_s", "startup_s")}
    figures["restore_persistent_s"] = figures["restore_persistent_s"] or figures["restore_local_s"]
    figures["restart_s"] = figures["restart_s"] or 0.0  # no failure in any run: nothing to restart
    figures["restore_local_s"] = figures["restore_local_s"] or 0.0
    figures["restore_persistent_s"] = figures["restore_persistent_s"] or 0.0
    exposure = sum(m["exposure_s"] for m in measured)
    counts = {k: sum(m["failures"].get(k, 0) for m in measured) for k in ("host_loss", "slice_loss", "preemption")}
    rates = FailureRates(*(counts[k] / exposure for k in counts)) if exposure else FailureRates()
    startup = figures.pop("startup_s")  # reported, not modelled: the goodput measured leaves it out
    costs = Costs(**figures)
    e = expected_goodput(costs, rates, periods[0], periods[1], steps)
    wall = steps * e.step_cost_s / (1 - e.failure_load) if e.failure_load < 1 else None
    return {"costs": figures, "startup_s": startup, "failures": counts, "exposure_s": exposure,
            "rates": rates.__dict__, "expected_wall_s": wall,
            "predicted_goodput": steps * step_s / wall if wall else 0.0}


# ---- running ---------------------------------------------------------------------------------------------
def run_once(api: Any, scratch: Path, arm: str, seed: int, periods: tuple[int, int], args: Any,
             plan: list[dict[str, Any]] | None = None, steps: int | None = None) -> dict[str, Any]:
    from mtc_provider.core.view.advisor import measure_events
    from mtc_provider.core.view.goodput import compute_goodput, timeline_from_workload_events
    from mtc_provider.core.definition.description.spec import CheckpointingSpec
    from mtc_provider.adapters.workload_events import events_dir, read_events

    run_name = f"ap-{arm}-{seed}"
    bucket = scratch / run_name
    spec = CheckpointingSpec(run_name, str(bucket), steps or args.steps, enable_emergency_checkpoint=True,
                             local_checkpoint_directory="/local", local_checkpoint_period=periods[0],
                             checkpoint_period=periods[1], enable_autocheckpoint=True)
    flags = {"seed": 0, "model_dim": args.model_dim, "global_batch_size": args.batch,
             "step_time_ms": args.step_time_ms}
    if plan is None:
        plan = poisson_fault_plan(seed, 1 / args.host_mtbf, 1 / args.slice_mtbf, args.timeout)
    name = f"{run_name}-a0"
    t0 = time.time()
    api.create(NAMESPACE, local_jobset(name, spec, flags, plan, max_restarts=len(plan) + 2))
    obj = wait_terminal(api, name, args.timeout)
    wall = time.time() - t0
    fired = api.faults(NAMESPACE, name)
    api.delete(NAMESPACE, name)
    events = read_events(events_dir(str(bucket), run_name))
    finished = any(e["event"] == "finish" for e in events)
    return {"arm": arm, "seed": seed, "periods": list(periods), "events": events, "wall_s": wall,
            "terminal": obj["status"].get("terminalState"), "restarts": obj["status"].get("restarts"),
            "finished": finished, "measured": measure_events(events).to_payload(),
            "faults_fired": [{k: f.get(k) for k in ("kind", "at_seconds", "slice", "step")} for f in fired],
            "core_goodput": compute_goodput(timeline_from_workload_events(events)).goodput}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from mtc_provider.core.view.advisor import FailureRates, advise, expected_goodput, measure_events, measured_goodput

    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=5, help="fault-process seeds per arm")
    parser.add_argument("--local-period", type=int, default=4, help="default L (the sample DAG's)")
    parser.add_argument("--persistent-period", type=int, default=20, help="default P (the sample DAG's)")
    parser.add_argument("--host-mtbf", type=float, default=90.0, help="seconds between host losses (mean)")
    parser.add_argument("--slice-mtbf", type=float, default=180.0, help="seconds between slice losses (mean)")
    parser.add_argument("--model-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--step-time-ms", type=int, default=100, help="simulated accelerator time per step")
    parser.add_argument("--calibration-steps", type=int, default=60, help="steps of the calibration run")
    parser.add_argument("--timeout", type=float, default=400, help="seconds per run")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.calibration_steps = 40, 1, 24
    default = (args.local_period, args.persistent_period)
    rates = FailureRates.from_mtbf(args.host_mtbf, args.slice_mtbf)
    runs: list[dict[str, Any]] = []
    with local_runner("advised") as (api, scratch):
        first = run_once(api, scratch, "calibration", 0, default, args, calibration_faults(args.calibration_steps),
                         args.calibration_steps)
        measured = measure_events(first.pop("events"))
        costs = measured.costs()
        startup = measured.startup_s or 0.0  # reported only: the goodput compared leaves start-up out
        advice = advise(costs, rates, args.steps)
        calibration = {"run": first, "measurements": measured.to_payload(), "costs": costs.__dict__,
                       "startup_s": startup, "advice": advice.to_payload()}
        print(f"calibration: {costs}; advice L={advice.local_period}, P={advice.persistent_period}", flush=True)
        for arm, seed in run_order(args.seeds):
            periods = default if arm == "default" else (calibration["advice"]["local_period"],
                                                        calibration["advice"]["persistent_period"])
            runs.append(run_once(api, scratch, arm, seed, periods, args))
    step_s = calibration["costs"]["step_s"]
    for run in runs:
        events = run.pop("events")
        run["goodput"] = goodput_after_startup(events, step_s) if run["finished"] else None
        run["goodput_with_startup"] = measured_goodput(events, step_s) if run["finished"] else None
    from mtc_provider.core.view.advisor import Costs

    costs = Costs(**calibration["costs"])
    predicted = {arm: expected_goodput(costs, rates, *periods, args.steps).goodput
                 for arm, periods in (("default", default), ("advised", (calibration["advice"]["local_period"],
                                                                          calibration["advice"]["persistent_period"])))}
    advised = (calibration["advice"]["local_period"], calibration["advice"]["persistent_period"])
    refit = {arm: model_from_runs([r["measured"] for r in runs if r["arm"] == arm],
                                  default if arm == "default" else advised, args.steps, step_s) for arm in ARMS}
    summary = summarize(runs, predicted)
    for arm in ARMS:
        mean = summary["arms"][arm]["mean_goodput"]
        summary["arms"][arm]["refit_predicted"] = refit[arm]["predicted_goodput"]
        summary["arms"][arm]["refit_error"] = (refit[arm]["predicted_goodput"] - mean) / mean if mean else None
    result = {"quick": args.quick,
              "parameters": {k: v for k, v in vars(args).items() if k not in ("output", "quick")},
              "calibration": calibration, "runs": runs, "refit": refit, "summary": summary}
    report(result)
    path = write_result(result_path(NAME, args.quick, args.output), NAME, result)
    print(f"result written to {path}")
    return result


def report(result: Mapping[str, Any]) -> None:
    advice = result["calibration"]["advice"]
    summary = result["summary"]
    rows = [[r["arm"], r["seed"], f"{r['periods'][0]}/{r['periods'][1]}", len(r["faults_fired"]), r["restarts"],
             r["wall_s"], r["measured"]["startup_s"], r["goodput"], r["goodput_with_startup"], r["core_goodput"]]
            for r in result["runs"]]
    print_table("Runs (goodput = steps x step time / wall time after start-up)",
                ["arm", "seed", "L/P", "faults", "restarts", "wall s", "start-up s", "goodput", "with start-up",
                 "core.view.goodput"], rows)
    arms = summary["arms"]
    print_table(
        f"Advised L={advice['local_period']}, P={advice['persistent_period']} (Young/Daly: "
        f"{advice['young_daly_local'] or 0:.1f} / {advice['young_daly_persistent'] or 0:.1f} steps)",
        ["", "default", "advised", "advised / default"],
        [["mean goodput (measured)", arms["default"]["mean_goodput"], arms["advised"]["mean_goodput"],
          summary["ratio"]],
         ["predicted goodput (model)", arms["default"]["predicted"], arms["advised"]["predicted"],
          summary["predicted_ratio"]],
         ["prediction error (pred/meas - 1)", arms["default"]["prediction_error"],
          arms["advised"]["prediction_error"], None],
         ["model on the arm's own figures", arms["default"]["refit_predicted"], arms["advised"]["refit_predicted"],
          ratio(arms["advised"]["refit_predicted"], arms["default"]["refit_predicted"])],
         ["its error (pred/meas - 1)", arms["default"]["refit_error"], arms["advised"]["refit_error"], None]])
    refit = result["refit"]
    print_table("Figures re-measured per arm", ["", "default", "advised"],
                [[name, refit["default"]["costs"][name], refit["advised"]["costs"][name]]
                 for name in refit["default"]["costs"]]
                + [["startup_s", refit["default"]["startup_s"], refit["advised"]["startup_s"]],
                   ["failures (host/slice)", "{host_loss}/{slice_loss}".format(**refit["default"]["failures"]),
                    "{host_loss}/{slice_loss}".format(**refit["advised"]["failures"])],
                   ["exposure_s", refit["default"]["exposure_s"], refit["advised"]["exposure_s"]]])
    print(f"per-seed ratios advised/default: {summary['per_seed_ratio']}")


if __name__ == "__main__":
    main()
