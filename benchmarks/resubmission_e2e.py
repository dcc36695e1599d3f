"""Benchmark 2b: failure to resubmission end to end, under a real Airflow (api-server, scheduler, dag-processor,
triggerer: tests/e2e/airflow_harness.py) and the local runner, each leg timed:

    fault -> JobSet Failed -> trigger event -> task failed -> retry scheduled -> next JobSet created

Three DAGs, every one run (none modelled), side by side in one Airflow:

- ``resub_ours``: the launch operator, deferrable, with the sample training DAG's retry settings
  (retry_delay 3 s, exponential backoff 2.0);
- ``resub_default_delay``: the same operator with Airflow's default retry_delay (core.default_task_retry_delay,
  300 s, no backoff; set explicitly, since the operator's own default is 30 s with backoff 2.0);
- ``resub_polling``: the ml-auto-solutions pattern, a sensor in reschedule mode poking every 60 s; each poke
  reads the JobSet and, when it failed, submits the next one (resubmission by polling).

A/B arms, alternated with ``resub_ours`` in one lane (ABBA), so each ratio comes from one run:

- ``resub_resume`` (``--resume N``): every ended attempt resumed on a worker (before triggers.attempt_end);
- ``resub_preload`` (``--preload N``): ``resub_ours`` on ``mtc_provider.executors.local.PreloadLocalExecutor``,
  the LocalExecutor whose workers are forked after the launch tries' first-use imports (mtc_provider.preload).
  The scheduler then runs both executors (``[core] executor = LocalExecutor,...PreloadLocalExecutor``, Airflow's
  multiple executors; Airflow's own first, so its workers are forked before the preload), and the arm's task
  names its executor (``executor="PreloadLocalExecutor"``): the other DAGs run as before.

The JobSets run sleepers (start-up is not what is measured), ``maxRestarts: 0``; the runner SIGKILLs one host
``--kill-at`` seconds after the pods start (exit 137, retryable), so the JobSet fails. An observer in this process
reads the runner's state every 50 ms (JobSet Failed, next JobSet) and the task instance through the REST API
every 0.5 s (deferred -> scheduled = trigger event; up_for_retry = task failed; try 2 scheduled/queued = retry
scheduled). Goal: p50 of fault -> next JobSet under retry_delay + 2 s for ``resub_ours``.

    python -m benchmarks.resubmission_e2e [--quick]
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import spans
from benchmarks.common import NAMESPACE, REPO, argument_parser, median, print_table, result_path, write_result

sys.path.insert(0, str(REPO / "tests" / "e2e"))
from airflow_harness import AirflowServer, free_port, server_env, wait_for  # noqa: E402

NAME = "resubmission_e2e"
OURS_RETRY_DELAY_S = 3.0
GOAL_MARGIN_S = 2.0
DAG_FILE = '''"""Resubmission benchmark DAGs (written by benchmarks/resubmission_e2e.py)."""
import datetime
PROFILE_HOOK

from airflow.sdk import DAG

from mtc_provider.operators.jobset import MtcJobSetOperator

PRELOAD_EXECUTOR = "PreloadLocalExecutor"  # only with --preload: an executor the scheduler does not run is an error

SLEEPER = ["python3", "-c", "import time; time.sleep(600)"]
SLICES = {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2, "machine_type": "ct6e-standard-4t"}
RUN = "{{ dag_run.conf['run'] }}"
KILL = [{"kind": "sigkill_host", "at_seconds": KILL_AT_S, "slice": 1, "host": 0}]


class ResumeOnWorker(MtcJobSetOperator):
    """The A/B arm: every ended attempt resumes on a worker (the provider before triggers.attempt_end)."""

    def defer(self, *, trigger, **kwargs):
        trigger.extra["end_retry_in_trigger"] = False
        super().defer(trigger=trigger, **kwargs)


def launch(operator=MtcJobSetOperator, **retry):
    return operator(
        task_id="train", slices=SLICES, target={"kind": "local"},
        checkpointing={"run_name": RUN, "base_output_directory": "LOCAL_HOME/buckets/mtc-bench", "steps": 10},
        workload={"jobset_name": RUN, "image": "local", "command": SLEEPER, "namespace": "default",
                  "max_restarts": 0, "termination_grace_period_seconds": 5},
        fault_plan=KILL, poll_interval=2.0, deferrable=True, retries=1, **retry)


OURS = {"retry_delay": datetime.timedelta(seconds=OURS_DELAY), "retry_exponential_backoff": 2.0,
        "max_retry_delay": datetime.timedelta(minutes=5)}
with DAG(dag_id="resub_resume", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False,
         render_template_as_native_obj=True):
    launch(ResumeOnWorker, **OURS)

if WITH_PRELOAD:
    with DAG(dag_id="resub_preload", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False,
             render_template_as_native_obj=True):
        launch(executor=PRELOAD_EXECUTOR, **OURS)

for dag_id, retry in (("resub_ours", OURS),
                      # Airflow's default (core.default_task_retry_delay, 300 s, no backoff), set explicitly:
                      # the launch operator's own default is 30 s with backoff 2.0.
                      ("resub_default_delay", {"retry_delay": datetime.timedelta(seconds=300),
                                               "retry_exponential_backoff": 0})):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False,
             render_template_as_native_obj=True):
        launch(**retry)

with DAG(dag_id="resub_polling", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):
    from airflow.providers.standard.sensors.python import PythonSensor

    def poke(run, **_):
        """One poke: submit the first JobSet, or the next one when the current one failed; never done."""
        import json

        from benchmarks.common import local_jobset
        from mtc_provider.core.definition.description.spec import CheckpointingSpec
        from mtc_local.cluster.client import LocalCluster

        api = LocalCluster("LOCAL_HOME")
        mine = sorted((o for o in api.list("default") if o["metadata"]["name"].startswith(run + "-p")),
                      key=lambda o: int(o["metadata"]["name"].rsplit("-p", 1)[1]))
        if mine and mine[-1].get("status", {}).get("terminalState") != "Failed":
            return False
        attempt = len(mine) + 1
        spec = CheckpointingSpec(run, "LOCAL_HOME/buckets/mtc-bench", 10, enable_checkpointing=False)
        body = local_jobset(f"{run}-p{attempt}", spec, max_restarts=0, grace_seconds=5,
                            fault_plan=json.loads(KILL_JSON) if attempt == 1 else None)
        for replicated in body["spec"]["replicatedJobs"]:
            replicated["template"]["spec"]["template"]["spec"]["containers"][0]["command"] = SLEEPER
        api.create("default", body)
        return False

    PythonSensor(task_id="train", python_callable=poke, op_kwargs={"run": RUN}, mode="reschedule",
                 poke_interval=60, timeout=3600)
PROFILE_END
'''


def dag_source(local_home: Path, kill_at_s: float, spans_path: Path | None = None, preload: bool = False) -> str:
    import json

    hook = 'from benchmarks.spans import mark\nmark("dag file start")' if spans_path else ""

    kill = [{"kind": "sigkill_host", "at_seconds": kill_at_s, "slice": 1, "host": 0}]
    return (DAG_FILE.replace("LOCAL_HOME", str(local_home)).replace("KILL_AT_S", repr(kill_at_s))
            .replace("OURS_DELAY", repr(OURS_RETRY_DELAY_S)).replace("KILL_JSON", repr(json.dumps(kill)))
            .replace("PROFILE_HOOK", hook).replace("WITH_PRELOAD", repr(preload))
            .replace("PROFILE_END", 'mark("dag file end")' if spans_path else ""))


class Observer(threading.Thread):
    """First-seen times of each run's JobSets (created, Failed) and of its task instance states."""

    def __init__(self, server: AirflowServer, local_home: Path) -> None:
        super().__init__(daemon=True)
        from mtc_local.cluster.client import LocalCluster

        self.server, self.api = server, LocalCluster(str(local_home))
        self.runs: dict[str, dict[str, Any]] = {}  # run -> {"dag_id", "jobsets": {name: {...}}, "ti": [...]}
        self.stop = threading.Event()
        self._next_rest = 0.0

    def watch(self, dag_id: str, run: str) -> None:
        self.runs[run] = {"dag_id": dag_id, "jobsets": {}, "ti": []}

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            objs = []
            for _ in range(5):  # a state file deleted or rewritten between listing and reading: read again
                try:
                    objs = self.api.list(NAMESPACE)
                    break
                except Exception:  # noqa: BLE001
                    time.sleep(0.005)
            for obj in objs:
                name = obj["metadata"]["name"]
                for run, data in self.runs.items():
                    if name.startswith(run + "-"):
                        seen = data["jobsets"].setdefault(name, {"created": now, "failed": None})
                        if seen["failed"] is None and obj.get("status", {}).get("terminalState") == "Failed":
                            seen["failed"] = now
            if now >= self._next_rest:
                self._next_rest = now + 0.5
                for run, data in self.runs.items():
                    if data.get("done"):
                        continue
                    try:
                        ti = self.server.api("GET", f"/dags/{data['dag_id']}/dagRuns/{run}/taskInstances/train",
                                             expect=(200, 404))
                    except Exception:  # noqa: BLE001
                        continue
                    if ti and "state" in ti:
                        state = (ti["state"], ti["try_number"])
                        if not data["ti"] or data["ti"][-1][1:] != state:
                            data["ti"].append((time.time(), *state))
            time.sleep(0.05)


def legs(data: dict[str, Any], kill_ts: float | None) -> dict[str, Any]:
    """The timed legs of one run from the observer's records."""
    jobsets = sorted(data["jobsets"].items(), key=lambda kv: kv[1]["created"])
    first = jobsets[0][1] if jobsets else {}
    nxt = jobsets[1][1]["created"] if len(jobsets) > 1 else None
    failed = first.get("failed")

    def first_ti(pred) -> float | None:
        return next((ts for ts, state, try_number in data["ti"] if pred(state, try_number)
                     and (failed is None or ts >= failed - 1.0)), None)

    # The trigger event: the first state after "deferred" (the observer polls every 0.5 s, so this is the
    # moment the task left the triggerer's hands, seen within 0.5 s).
    deferred_at = next((ts for ts, state, _ in data["ti"] if state == "deferred"), None)
    event = next((ts for ts, state, _ in data["ti"] if deferred_at is not None and ts > deferred_at
                  and state != "deferred"), None)
    task_failed = first_ti(lambda s, t: s in ("up_for_retry", "failed"))
    retry = first_ti(lambda s, t: t >= 2 and s in ("scheduled", "queued", "running"))

    def span(a: float | None, b: float | None) -> float | None:
        return round(b - a, 3) if a is not None and b is not None else None

    return {"kill_to_failed_s": span(kill_ts, failed), "failed_to_trigger_event_s": span(failed, event),
            "trigger_event_to_task_failed_s": span(event, task_failed),
            "task_failed_to_retry_scheduled_s": span(task_failed, retry),
            "retry_scheduled_to_next_jobset_s": span(retry, nxt),
            "failed_to_next_jobset_s": span(failed, nxt), "kill_to_next_jobset_s": span(kill_ts, nxt),
            "at": {"kill": kill_ts, "failed": failed, "trigger_event": event, "task_failed": task_failed,
                   "retry_scheduled": retry, "next_jobset": nxt},
            "jobsets": [name for name, _ in jobsets], "ti_states": data["ti"]}


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--ours", type=int, default=3, help="runs of resub_ours (one after another)")
    parser.add_argument("--resume", type=int, default=0,
                        help="runs of resub_resume: the launch operator with every ended attempt resumed on a worker "
                             "(the A/B arm of ending a retryable try in the triggerer)")
    parser.add_argument("--preload", type=int, default=0,
                        help="runs of resub_preload: resub_ours on mtc_provider.executors.local.PreloadLocalExecutor "
                             "(the A/B arm of the LocalExecutor preload)")
    parser.add_argument("--polling", type=int, default=2, help="runs of resub_polling (one after another)")
    parser.add_argument("--default-delay", type=int, default=1, help="runs of resub_default_delay")
    parser.add_argument("--kill-at", type=float, default=6.0, help="seconds after the pods start")
    parser.add_argument("--profile", action="store_true",
                        help="time the provider's own calls inside the task processes (benchmarks/spans.py) and "
                             "print the breakdown of the two provider legs of resub_ours")
    args = parser.parse_args()
    if args.quick:
        args.ours, args.polling, args.default_delay = 1, 0, 0
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    scratch = Path(tempfile.mkdtemp(prefix="mtc-bench-resub-e2e-"))
    home, local_home, dags = scratch / "airflow", scratch / "local", scratch / "dags"
    for path in (home, local_home, dags):
        path.mkdir()
    spans_path = scratch / "spans.jsonl" if args.profile else None
    (dags / "resub_dags.py").write_text(dag_source(local_home, args.kill_at, spans_path, args.preload > 0))
    port = free_port()
    python_path = [str(REPO), str(REPO / "provider")]
    extra_env = {}
    if spans_path:  # every Airflow process records spans (benchmarks/profile_site/sitecustomize.py)
        python_path.insert(0, str(REPO / "benchmarks" / "profile_site"))
        extra_env["MTC_BENCH_SPANS"] = str(spans_path)
    if args.preload:  # Airflow's LocalExecutor first: its workers are forked before the other one's preload
        extra_env["AIRFLOW__CORE__EXECUTOR"] = "LocalExecutor,mtc_provider.executors.local.PreloadLocalExecutor"
    env = server_env(home, local_home, port, dags, {"PYTHONPATH": os.pathsep.join(python_path), **extra_env})
    server = AirflowServer(home=home, local_home=local_home, port=port, env=env)
    results: dict[str, list[dict[str, Any]]] = {"resub_ours": [], "resub_resume": [], "resub_preload": [],
                                                "resub_default_delay": [], "resub_polling": []}
    arms = {"resub_ours": args.ours, "resub_resume": args.resume, "resub_preload": args.preload}
    started = time.time()
    try:
        server.start()
        observer = Observer(server, local_home)
        for dag_id in results:
            if dag_id == "resub_preload" and not args.preload:
                continue
            server.wait_for_dag(dag_id, timeout=300)
            server.unpause(dag_id)
        observer.start()
        # resub_ours and its A/B arms alternate in one lane (ABBA: the same run, never two launches at once)
        ab = [d for i in range(max(arms.values())) for d in list(arms)[::1 - 2 * (i % 2)] if arms[d] > i]
        plan = [(ab, results), (["resub_default_delay"] * args.default_delay, results),
                (["resub_polling"] * args.polling, results)]
        lanes = [threading.Thread(target=_lane, args=(server, observer, order, out), daemon=True)
                 for order, out in plan if order]
        for lane in lanes:
            lane.start()
        for lane in lanes:
            lane.join()
        observer.stop.set()
    finally:
        killed = server.stop()
        span_records = spans.read(str(spans_path)) if spans_path else []
        failed = any(r.get("error") for rows in results.values() for r in rows)
        if failed:  # the Airflow logs and the cluster's state are what explain a failed run
            print(f"a run failed: its Airflow and cluster files are kept in {scratch}", flush=True)
        elif not os.environ.get("MTC_BENCH_KEEP"):
            shutil.rmtree(scratch, ignore_errors=True)
    summary = {}
    for dag_id, rows in results.items():
        summary[dag_id] = {key: median([r.get(key) for r in rows]) for key in
                           ("kill_to_failed_s", "failed_to_trigger_event_s", "trigger_event_to_task_failed_s",
                            "task_failed_to_retry_scheduled_s", "retry_scheduled_to_next_jobset_s",
                            "failed_to_next_jobset_s", "kill_to_next_jobset_s")}
        summary[dag_id]["n"] = len([r for r in rows if r.get("kill_to_next_jobset_s") is not None])
    p50 = summary["resub_ours"]["kill_to_next_jobset_s"]
    resume_p50 = summary["resub_resume"]["kill_to_next_jobset_s"]
    preload_p50 = summary["resub_preload"]["kill_to_next_jobset_s"]
    ab = round(p50 / resume_p50, 3) if p50 and resume_p50 else None
    if ab is not None:
        print(f"kill -> next JobSet, ended in the triggerer / resumed on a worker (same run): {p50} / {resume_p50} s "
              f"= {ab}")
    preload_ab = round(preload_p50 / p50, 3) if p50 and preload_p50 else None
    if preload_ab is not None:
        print(f"kill -> next JobSet, with the LocalExecutor preload / without (same run): {preload_p50} / {p50} s "
              f"= {preload_ab}")
    goal_s = OURS_RETRY_DELAY_S + GOAL_MARGIN_S
    print_table("Failure to resubmission under a real scheduler and triggerer (medians, s)",
                ["DAG", "n", "kill->Failed", "Failed->event", "event->task failed", "failed->retry scheduled",
                 "retry->next JobSet", "kill->next JobSet"],
                [[d, s["n"], s["kill_to_failed_s"], s["failed_to_trigger_event_s"],
                  s["trigger_event_to_task_failed_s"], s["task_failed_to_retry_scheduled_s"],
                  s["retry_scheduled_to_next_jobset_s"], s["kill_to_next_jobset_s"]] for d, s in summary.items()])
    result = {"quick": args.quick, "parameters": {k: v for k, v in vars(args).items() if k not in ("output",)},
              "ours_retry_delay_s": OURS_RETRY_DELAY_S, "goal_s": goal_s,
              "goal_met": p50 is not None and p50 < goal_s,
              "preload_goal_met": preload_p50 is not None and preload_p50 < goal_s,
              "load_average_at_start": load_at_start,
              "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "ours_over_resume": ab, "preload_over_ours": preload_ab,
              "wall_s": round(time.time() - started, 1), "killed_at_teardown": killed,
              "summary": summary, "runs": results}
    if args.profile:
        result["profile"] = {dag_id: profile_legs(dag_id, results[dag_id], span_records)
                             for dag_id in ("resub_ours", "resub_resume", "resub_preload") if results[dag_id]}
    path = write_result(result_path(NAME, args.quick, args.output), NAME, result)
    print(f"result: {path}")


def profile_legs(dag_id: str, rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run and at the median: where the seconds of the two provider legs go (benchmarks/spans.py). The first
    leg is the resumed `execute_complete` on a worker, or (ended in the triggerer) the trigger's own end."""
    legs_spec = (("trigger event -> task failed", "MtcJobSetOperator.execute_complete", 1, "trigger_event",
                  "task_failed"),
                 ("retry scheduled -> next JobSet", "MtcJobSetOperator.execute", 2, "retry_scheduled", "next_jobset"))
    out: dict[str, Any] = {}
    for title, top, try_number, start_key, end_key in legs_spec:
        per_run = []
        for row in rows:
            at = row.get("at") or {}
            mine = spans.try_records(records, row["run"], try_number, top)
            if mine:
                per_run.append(spans.breakdown(mine, top, at.get(start_key), at.get(end_key)))
            elif try_number == 1:  # ended in the triggerer: its span is the provider's whole part of this leg
                ended = [r for r in records if r["run_id"] == row["run"] and (
                    r["name"].startswith("trigger:") or r["name"] == "pod-log tails of failed pods")]
                if ended:
                    per_run.append({"provider: " + r["name"]: round(r["end"] - r["start"], 3) for r in ended
                                    if r["name"].startswith("trigger: end")}
                                   | {"  (of which " + r["name"] + ")": round(r["end"] - r["start"], 3)
                                      for r in ended if not r["name"].startswith("trigger: end")})
        keys = list(dict.fromkeys(k for b in per_run for k in b))
        medians = {k: median([b.get(k) for b in per_run]) for k in keys}
        provider = median([sum(v for k, v in b.items() if k.startswith("provider:")) for b in per_run])
        out[title] = {"median_s": medians, "provider_total_median_s": provider, "runs": per_run}
        print_table(f"{dag_id}: breakdown of {title} (try {try_number}; medians of n={len(per_run)}, s)",
                    ["segment", "median s"], [[k, v] for k, v in medians.items()] + [["provider total", provider]])
    totals = [out[t]["provider_total_median_s"] for t, *_ in legs_spec]
    out["provider_both_legs_median_s"] = round(sum(t or 0 for t in totals), 3)
    print(f"{dag_id}: the provider's own part of both legs (sum of the medians): "
          f"{out['provider_both_legs_median_s']} s")
    return out


def _lane(server: AirflowServer, observer: Observer, order: list[str], results: dict[str, list[dict[str, Any]]]
          ) -> None:
    """Run the DAGs of `order` one after another: trigger, wait for the next JobSet, delete the run's JobSets."""
    from mtc_local.cluster.client import LocalCluster

    api = LocalCluster(str(observer.api.home.root))
    for index, dag_id in enumerate(order):
        out = results[dag_id]
        timeout = 420 if dag_id == "resub_default_delay" else 240
        run = f"{dag_id.split('_')[1][:4]}{index}-{int(time.time()) % 100000}"
        observer.watch(dag_id, run)
        for attempt in range(5):  # SQLite under load: "database is locked" comes back as a 500
            try:
                server.api("POST", f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run, "conf": {"run": run},
                                                                   "logical_date": None})
                break
            except AssertionError:
                if attempt == 4:
                    raise
                time.sleep(2.0)
        data = observer.runs[run]
        try:
            wait_for(f"{run}: next JobSet", lambda: len(data["jobsets"]) >= 2, timeout, interval=0.5)
        except BaseException as exc:  # noqa: BLE001 - record the miss, keep the other runs going
            data["error"] = str(exc)[:500]
        data["done"] = True
        faults = api.run_faults(NAMESPACE, run) or [f for name in data["jobsets"]
                                                    for f in api.faults(NAMESPACE, name)]
        kill_ts = float(faults[0]["ts"]) if faults else None
        out.append({"run": run, **legs(data, kill_ts), **({"error": data["error"]} if "error" in data else {})})
        for name in list(data["jobsets"]):
            try:
                api.delete(NAMESPACE, name, timeout=60)
            except Exception:  # noqa: BLE001
                pass
        try:
            server.api("PATCH", f"/dags/{dag_id}/dagRuns/{run}", json={"state": "failed"}, expect=(200, 400, 409))
        except Exception:  # noqa: BLE001
            pass


if __name__ == "__main__":
    main()
