"""The orchestrator-fault soak (issue #23): the resilient training DAG on the local target, through the production
topology (scripts/airflow_topology.py: PostgreSQL, Celery on Redis, two schedulers, two triggerers, a worker,
dag-processor, api-server), training for over 10 minutes while a seeded schedule (soak_schedule.py) injects, one
after the other while train is deferred on a live attempt:

- a triggerer stop: SIGSTOP of the triggerer holding train's trigger until the other took it over, then SIGCONT;
- a triggerer SIGKILL (restarted, as `restart: always` does);
- a Kubernetes API outage of 2 minutes: 503 with Retry-After, then refused connections; and one that only hangs;
- a listing outage of the checkpoint bucket; a watch cut; a worker SIGKILL (restarted);
- Airflow's own services (issue #33 item 11): the metadata database unreachable for 60-75 s and the broker for
  60 s (Airflow's connections refused and reset, through the topology's forwarders; what exits meanwhile is
  restarted as `restart: always` does), and, last, one of the two api-servers SIGKILLed as train resumes at
  training's end and restarted 45 s later (the resume must reach the other replica, as Docker's DNS would send it);
and, from the runner's fault plan, an in-cluster restart whose pods cannot pull their image for a while, then a
real attempt failure (a host lost past max_restarts). That attempt made progress first, so the same try submits
the next one (docs/resubmission.md, "Interruptions counted by progress"); only an attempt without progress spends
an Airflow retry.

It passes when the run succeeds with the fault-free run's final parameters (bit for bit), no JobSet was deleted
except by an attempt's own end or the teardown after success (the local API server's delete audit), no Airflow
retry was spent on an orchestrator fault (train's retries are at most the attempts that failed on their own; no
other task retried), no run lock is left, and no process is left behind. It prints the timeline of faults and
supervision gaps, each fault with its effect (supervision gaps, replicas restarted, tries that never reached the
provider), why each try ended (task log, else the trigger's log), and writes the figures to $MTC_SOAK_RESULTS
(make soak: benchmarks/results/soak.json).

Slow (about 15 minutes) and not part of `make test`: `make soak` runs it (pytest -m soak), and CI does.
Replay a run's schedule with MTC_SOAK_SEED=<seed>.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from benchmarks.common import local_runner, wait_terminal
from mtc_provider.adapters.workload_events import read_events
from scripts.airflow_topology import REPO, Topology, wait_until
from tests.deploy import soak_harness as H
from tests.deploy import soak_schedule as S
from tests.deploy.soak_api_faults import ApiFaults
from tests.deploy.test_topology_faults import TIMINGS

pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(2700)]

RUN_NAME = "soak"
STEPS = int(os.environ.get("MTC_SOAK_STEPS", "280"))
# 280 steps of 2.2-2.6 s: over 10 minutes of training (13 here); checkpoints every 20 steps (~45 s), local ones every 5.
CONF = {"checkpointing": {"steps": STEPS, "checkpoint_period": 20, "local_checkpoint_period": 5},
        "workload": {"max_restarts": 1, "extra_flags": {"step_time_ms": 2200, "distributed_timeout_s": 90}},
        "stall_timeout": 300}
RUN_TIMEOUT = 1800.0
MIN_TRAINING_S = 600.0


def _skip() -> set[str]:
    """MTC_SOAK_SKIP=kind,kind: leave these out (orchestrator or runner kinds), the rest at the schedule's times
    (to look at the others while a fix is missing; the soak's pass needs every kind)."""
    return {k for k in os.environ.get("MTC_SOAK_SKIP", "").split(",") if k}


def _only() -> list[str] | None:
    """MTC_SOAK_ONLY=kind,kind: inject only these, in this order (to try injectors; the soak injects every kind)."""
    raw = os.environ.get("MTC_SOAK_ONLY", "").strip()
    return raw.split(",") if raw else None


@pytest.fixture(scope="module")
def reference_sha() -> Iterator[Any]:
    """The fault-free run, straight on the local target: the JobSet the launch operator submits for the same form,
    without faults and without the per-step sleep (it changes the time a step takes, not what it computes)."""
    from airflow.dag_processing.dagbag import DagBag

    from mtc_provider.core.definition.render.jobset_manifest import build_jobset
    from mtc_provider.core.definition.description.params import form_with_conf, training_run
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.core.definition.shape.tpu import SliceSpec

    dag = DagBag(dag_folder=str(REPO / "dags" / f"{H.DAG_ID}.py")).dags[H.DAG_ID]
    params = form_with_conf(dag.params.dump(), {
        **CONF, "checkpointing": {**CONF["checkpointing"], "run_name": "soak-reference"}, "fault_plan": [],
        "workload": {**CONF["workload"], "extra_flags": {**CONF["workload"]["extra_flags"], "step_time_ms": 0}}})
    with local_runner("soak-reference") as (api, _):
        plan = training_run(params, str(api.home.root))
        workload = WorkloadSpec(**{**plan["workload"], "command": tuple(plan["workload"]["command"])})
        body = build_jobset(SliceSpec(**plan["slices"]), CheckpointingSpec(**plan["checkpointing"]), workload, {})
        api.create(H.NAMESPACE, body)

        def sha() -> set[str]:
            obj = wait_terminal(api, body["metadata"]["name"], RUN_TIMEOUT)
            assert obj["status"]["terminalState"] == "Completed", obj["status"]
            checkpoints = Path(plan["checkpointing"]["base_output_directory"]) / "soak-reference"
            return {e["params_sha256"] for e in read_events(checkpoints / "events") if e["event"] == "finish"}

        yield sha


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    topo = Topology(tmp_path_factory.mktemp("soak"), extra_env=TIMINGS)
    try:
        topo.start()
        topo.restart_always()
        wait_until(f"DAG {H.DAG_ID} parsed", lambda: _dag_parsed(topo), 180, interval=2, alive=topo.check_alive)
        topo.api("PATCH", f"/dags/{H.DAG_ID}", json={"is_paused": False})
        yield topo
    finally:
        killed = topo.stop()
        left = topo.leftovers()
        topo.drop()
        assert not killed, f"processes still running after the topology stopped (killed by PID): {killed}"
        assert not left, f"processes left behind: {left}"


def _dag_parsed(topo: Topology) -> bool:
    try:
        return bool(topo.api("GET", f"/dags/{H.DAG_ID}"))
    except RuntimeError:
        return False


def _run_state(topo: Topology, run_id: str) -> str:
    return topo.sql("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (H.DAG_ID, run_id))[0][0]


def test_soak_training_survives_a_seeded_schedule_of_orchestrator_faults(reference_sha, topology: Topology,
                                                                        record_property):
    topo = topology
    schedule = S.make_schedule(S.seed_from_env())
    only = _only()
    skip = _skip()
    faults = [f for f in schedule.faults if f.kind not in skip] if only is None else \
        [f for kind in only for f in schedule.faults if f.kind == kind]
    print(schedule.describe(), flush=True)
    plan = [f for f in schedule.fault_plan if (only is None or f["kind"] in only) and f["kind"] not in skip]
    conf = {**CONF, "checkpointing": {**CONF["checkpointing"], "run_name": RUN_NAME}, "fault_plan": plan}
    run_id = topo.api("POST", f"/dags/{H.DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})["dag_run_id"]
    timeline = H.Timeline()
    sampler = H.Sampler(topo, run_id, RUN_NAME, timeline).start()
    injectors = H.Injectors(topo, sampler, timeline, ApiFaults(topo.places.local_home))
    started = time.time()
    injected: list[dict[str, Any]] = []
    try:
        wait_until("train deferred for the first time", lambda: sampler.train()[0] == "deferred", 600, interval=0.5,
                   alive=topo.check_alive)
        timeline.origin = time.time()
        timeline.add("soak", f"train deferred: training started, schedule seed {schedule.seed}")
        for fault in faults:
            # Trying a few injectors (MTC_SOAK_ONLY): one after the other, 20 s apart, not at the schedule's times.
            due = time.time() + 20 if only else timeline.origin + fault.at_s
            time.sleep(max(0.0, due - time.time()))
            done = injectors.run(fault)
            if done is None:  # the run ended first: what was not injected is reported below
                break
            injected.append(done)

        def ended() -> str | None:
            state = _run_state(topo, run_id)
            return state if state in ("success", "failed") else None

        state = wait_until("the run to end", ended, RUN_TIMEOUT, interval=2, alive=topo.check_alive)
    finally:
        sampler.stop()
        for record in H.deletes(topo):
            timeline.add("delete", f"{record['path'].rsplit('/', 1)[-1]} {record['code']} by {record['caller']} "
                                   f"({record['reason'] or 'no reason'})", record["time"])
        for record in H.runner_faults(topo, RUN_NAME):
            timeline.add("runner fault", f"{record['kind']} on {record.get('jobset')} at step {record.get('step')}",
                         record["ts"])
        for gap in sampler.gaps():
            timeline.add("supervision gap", f"{gap.seconds}s ({gap.cause}: {', '.join(gap.states)})", gap.start)
        for record in topo.restarts:
            timeline.add("restart: always", f"{record['replica']} exited {record['exited']}, restarted after "
                                            f"{record['delay_s']}s", record["at"])
        print("\n--- soak timeline (seconds since training started)\n" + timeline.render(), flush=True)

    tries = H.tries(topo, run_id)
    failed_attempts = [r for r in sampler.jobsets.values() if r.terminal == "Failed"]
    gaps = sampler.gaps()
    events = read_events(topo.places.local_home / "buckets" / "mtc-checkpoints" / RUN_NAME / "events")
    audit = H.deletes(topo)
    bad = H.bad_deletes(audit, sampler.jobsets, H.train_end(topo, run_id))
    reference = reference_sha()
    final_sha = {e["params_sha256"] for e in events if e["event"] == "finish"}
    history = H.try_history(topo, run_id)
    unreached = [t["try"] for t in history if t["state"] != "success" and not H.reached_provider(topo, run_id, t["try"])]
    figures = {
        "seed": schedule.seed, "state": state, "wall_s": round(time.time() - started, 1),
        "training_s": H.training_seconds(events), "steps": STEPS,
        "faults_injected": H.effects(injected, sampler.gaps(), topo.restarts, history, timeline.origin,
                                     lambda n: H.reached_provider(topo, run_id, n)),
        "restarts": [{**r, "at_s": timeline.rel(r["at"])} for r in topo.restarts],
        "tries_never_reaching_the_provider": unreached,
        "runner_faults": [{k: r.get(k) for k in ("kind", "jobset", "step", "restart")}
                                                       for r in H.runner_faults(topo, RUN_NAME)],
        "tries": tries, "train_retries": tries.get("train", 1) - 1,
        "retry_reasons": H.try_reasons(topo, run_id, "train", tries.get("train", 1) - 1),
        "attempts": {r.name: {"terminal": r.terminal, "reason": r.reason, "restarts": r.restarts}
                     for r in sampler.jobsets.values()},
        "gaps": [{"at_s": timeline.rel(g.start), "seconds": g.seconds, "cause": g.cause, "states": g.states,
                  "holders": g.holders} for g in gaps],
        "longest_gap_s": max((g.seconds for g in gaps), default=0.0),
        "longest_triggerer_gap_s": max((g.seconds for g in gaps if g.cause == "triggerer"), default=0.0),
        "deletes": audit, "sampler_errors": sampler.errors[:20],
    }
    record_property("soak", figures)
    H.write_results(os.environ.get("MTC_SOAK_RESULTS"), figures)
    print("--- faults and their effects\n" + "\n".join(
        f"{f['at_s']:>8.1f}s  {f['kind']:<16} {json.dumps(f['effect'])}" for f in figures["faults_injected"]),
        flush=True)
    states = {t["try"]: t["state"] for t in history}
    print("--- train's tries (why each ended: task log, else the trigger's)\n" + "\n".join(
        f"try {n} ({states.get(n)}): {why if states.get(n) != 'success' else 'succeeded'}"
        for n, why in H.try_reasons(topo, run_id, "train", tries.get("train", 1)).items()), flush=True)
    print("--- supervision gaps\n" + "\n".join(f"{g['at_s']:>8.1f}s  {g['seconds']:>6.1f}s  {g['cause']:<9} "
                                               f"{','.join(g['states'])} {','.join(g['holders'])}"
                                               for g in figures["gaps"]), flush=True)

    problems = []
    missed = [f.kind for f in faults[len(injected):]]
    if skip or only is not None:
        problems.append(f"not a full soak: skipped {sorted(skip)}, only {only}")
    if missed:
        problems.append(f"not injected, the run ended first: {missed}")
    if state != "success":
        last = H.try_reasons(topo, run_id, "train", max(1, tries.get("train", 1)))
        problems.append(f"the run ended {state}: tasks {H.task_states(topo, run_id)}; train's last try: "
                        f"{last[max(last)]}")
    if final_sha != reference:
        problems.append(f"final parameters {final_sha} differ from the fault-free run's {reference}")
    if bad:
        problems.append(f"JobSets deleted other than by an attempt's end or the teardown after success: {bad}")
    if figures["train_retries"] > len(failed_attempts):  # a failure after progress is followed in the same try
        problems.append(f"train used {figures['train_retries']} retries for {len(failed_attempts)} failed attempts "
                        f"({[r.name for r in failed_attempts]}): {figures['retry_reasons']}")
    others = {task: n for task, n in tries.items() if task != "train" and n > 1}
    if others:
        problems.append(f"retries spent by other tasks: {others}")
    if H.lock_left(topo, RUN_NAME):
        problems.append(f"the run lock {RUN_NAME} is left")
    if only is None and figures["training_s"] < MIN_TRAINING_S:
        problems.append(f"trained {figures['training_s']}s, under {MIN_TRAINING_S:.0f}s")
    assert not problems, "\n".join(problems)
