"""The main job: the resilient training DAG on the local target, with injected faults, then a summary.

    make demo                      # the sample DAG with its default fault plan
    make demo ARGS=--baseline      # also the persistent-only baseline (emergency checkpointing off)

It makes a fresh Airflow home (embedded SQLite) and local-target home under .mtc/demo/, runs the DAG
`mtc_resilient_training` with `airflow dags test` (the scheduler loop in one process, the triggerer
inline), shows progress while it runs, and ends with attempts, in-cluster restarts, the cost of each
fault, wall time, goodput and the timeline chart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / ".mtc" / "demo"
AIRFLOW_HOME = DEMO / "airflow"
LOCAL_HOME = DEMO / "local"
DAG_ID = "mtc_resilient_training"



def use_demo_homes() -> None:
    """Point Airflow and the local target at the demo's homes (before Airflow is first imported)."""
    os.environ.update(
        {
            "AIRFLOW_HOME": str(AIRFLOW_HOME),
            "MTC_LOCAL_HOME": str(LOCAL_HOME),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        }
    )


from rich.console import Console  # noqa: E402
from rich.live import Live  # noqa: E402
from rich.table import Table  # noqa: E402

# Wide enough for the fault table when the output is a log file or CI, not a terminal.
console = Console(width=None if sys.stdout.isatty() else 120)


def airflow(*args: str, log: Path | None = None) -> int:
    """Run the venv's airflow CLI (it must be on PATH for the processes Airflow itself spawns)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(Path(sys.executable).parent / "airflow"), *args]
    if log is None:
        return subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT).returncode
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        return process.wait()


def fresh_home() -> None:
    """A new Airflow home and local target each time: a rehearsal starts from nothing."""
    if LOCAL_HOME.exists():
        from mtc_local.cluster.lifecycle import stop

        stop(LOCAL_HOME)  # `mtc local down`: its pods are killed, nothing of the last rehearsal keeps running
    shutil.rmtree(DEMO, ignore_errors=True)
    AIRFLOW_HOME.mkdir(parents=True)
    LOCAL_HOME.mkdir(parents=True)


def progress_table(run_name: str, events_dir: Path, started: float, label: str) -> Table:
    from mtc_local.cluster.client import LocalCluster
    from mtc_local.faults.report import run_restores
    from mtc_provider.adapters.workload_events import read_events

    events = read_events(events_dir) if events_dir.exists() else []
    steps = [e["step"] for e in events if e.get("event") == "step"]
    faults = LocalCluster(str(LOCAL_HOME)).run_faults("default", run_name) if LOCAL_HOME.exists() else []
    table = Table(title=f"{label}: {run_name}", show_header=False)
    table.add_row("elapsed", f"{time.time() - started:.0f} s")
    table.add_row("newest step", str(max(steps) if steps else "-"))
    table.add_row("restores", "\n".join(r.describe() for r in run_restores(events)) or "-")
    table.add_row("faults fired", ", ".join(f"{f['kind']}@{f.get('step')}" for f in faults) or "-")
    return table


def run_dag(conf: dict, label: str) -> tuple[int, float]:
    run_name = conf["checkpointing"]["run_name"]
    events_dir = LOCAL_HOME / "buckets" / "mtc-checkpoints" / run_name / "events"
    log = DEMO / f"{run_name}.log"
    result: dict[str, int] = {}
    started = time.time()
    thread = threading.Thread(
        target=lambda: result.setdefault("rc", airflow("dags", "test", DAG_ID, "-c", json.dumps(conf), log=log))
    )
    thread.start()
    with Live(progress_table(run_name, events_dir, started, label), console=console, refresh_per_second=2) as live:
        while thread.is_alive():
            thread.join(timeout=1.0)
            live.update(progress_table(run_name, events_dir, started, label))
    console.print(f"[dim]Airflow log of this run: {log}[/dim]")
    return result.get("rc", 1), time.time() - started


def summarize(run_name: str, wall_s: float) -> dict:
    """Read the run back from Airflow's database, the runner and the workload's events."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from mtc_local.cluster.client import LocalCluster
    from mtc_provider.adapters.workload_events import read_events

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == DAG_ID).order_by(DagRun.id.desc()).first()
        tis = {ti.task_id: ti for ti in session.query(TaskInstance).filter(TaskInstance.run_id == run.run_id,
                                                                             TaskInstance.dag_id == DAG_ID)}

        def xcom(task_id: str, key: str = "return_value"):
            row = session.query(XComModel).filter(XComModel.run_id == run.run_id, XComModel.task_id == task_id,
                                                 XComModel.key == key, XComModel.dag_id == DAG_ID).first()
            return None if row is None else (json.loads(row.value) if isinstance(row.value, str) else row.value)

        recorded = {
            "run_id": run.run_id,
            "run_state": str(run.state),
            "train_tries": tis["train"].try_number if "train" in tis else 0,
            "train": xcom("train") or {},
            "attempts": xcom("train", "attempts"),
            "goodput": xcom("goodput") or {},
        }
    plan_dir = LOCAL_HOME / "buckets" / "mtc-checkpoints" / run_name
    events = read_events(plan_dir / "events") if (plan_dir / "events").exists() else []
    faults = LocalCluster(str(LOCAL_HOME)).run_faults("default", run_name)
    return build_summary(recorded, events, faults, wall_s)


def build_summary(recorded: dict, events: list[dict], faults: list[dict], wall_s: float) -> dict:
    """The summary from what the run recorded: Airflow's rows and XComs (`recorded`), the workload's events and
    the runner's fault records. In-cluster restarts are the JobSets' own `status.restarts`, as the launch
    operator recorded them per attempt (its `attempts` XCom; the `train` return value when that is missing)."""
    from mtc_provider.core.attempt.attempt_records import in_cluster_restarts
    from mtc_local.faults.report import fault_outcomes, run_restores

    train = recorded.get("train") or {}
    records = recorded.get("attempts") or ([train] if "restarts" in train else [])
    restarts = in_cluster_restarts(records)
    return {
        "run_id": recorded.get("run_id"),
        "run_state": recorded.get("run_state"),
        "train_tries": recorded.get("train_tries", 0),
        "train": train,
        "goodput": recorded.get("goodput") or {},
        "attempts": records,
        "faults": [o.to_dict() for o in fault_outcomes(faults, events)],
        "restores": [restore.describe() for restore in run_restores(events)],
        "wall_s": wall_s,
        "restarts_total": restarts.total,
        "restarts": restarts.describe(),
        "final_sha256": next((e.get("params_sha256") for e in reversed(events) if e.get("event") == "finish"), None),
    }


def print_summary(title: str, summary: dict) -> None:
    report, train = summary["goodput"], summary["train"]
    table = Table(title=title, show_header=False)
    table.add_row("DAG run", summary["run_state"])
    table.add_row("tries of `train` (Airflow retries spent + 1)", str(summary["train_tries"]))
    # an attempt ended after progress is followed in the same try (docs/resubmission.md): attempts >= tries
    table.add_row("attempts (JobSets of the run)", str(train.get("attempt", "-")))
    table.add_row("in-cluster restarts (all attempts)", summary["restarts"])
    table.add_row("last finalized step", str(train.get("last_step", train.get("latest_step", "-"))))
    table.add_row("wall time", f"{summary['wall_s']:.0f} s")
    if report:
        table.add_row("goodput (productive step time / elapsed)", f"{100 * report.get('goodput', 0):.1f}%")
        table.add_row("chart", str(report.get("chart_path")))
    table.add_row("final parameters sha256", str(summary.get("final_sha256"))[:16])
    console.print(table)
    faults = Table(title="Faults", show_lines=False)
    for column in ("fault", "target", "last step", "restored", "tier", "restore s", "steps lost", "to next step s"):
        faults.add_column(column)
    for f in summary["faults"]:
        faults.add_row(f["kind"], f["target"], str(f["last_step"]), str(f["restored_step"]), str(f["tier"]),
                       "-" if f["restore_s"] is None else f"{f['restore_s']:.2f}", str(f["steps_lost"]),
                       "-" if f["recovery_s"] is None else f"{f['recovery_s']:.1f}")
    console.print(faults)


def run_view_hint(run_id: str | None, port: int = 8080) -> list[str]:
    """Where to open the run's training-run view (the provider's plugin in Airflow's api-server)."""
    from mtc_provider.links.run_view import run_path

    path = run_path(DAG_ID, run_id) if run_id else "/mtc/"
    return [f"AIRFLOW_HOME={AIRFLOW_HOME} MTC_LOCAL_HOME={LOCAL_HOME} {Path(sys.executable).parent / 'airflow'} "
            f"api-server --host 127.0.0.1 --port {port}",
            f"http://127.0.0.1:{port}{path}  (log in as in {AIRFLOW_HOME}/simple_auth_manager_passwords.json.generated;"
            f" or the run's 'Training run' tab)"]


def print_run_view(run_id: str | None) -> None:
    start, url = run_view_hint(run_id)
    console.print("[bold]The run view[/bold] (attempts, step, checkpoints by tier, restores, goodput, chart): start "
                  "Airflow's api-server on the demo's home and open it:")
    console.print(f"  {start}", soft_wrap=True)
    console.print(f"  {url}", soft_wrap=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", action="store_true", help="also run the persistent-only baseline")
    parser.add_argument("--steps", type=int, default=None, help="target step count")
    args = parser.parse_args()

    use_demo_homes()
    console.rule("airflow-provider-mtc: resilient training on the local target")
    fresh_home()
    console.print(f"Airflow home {AIRFLOW_HOME} (SQLite); local target {LOCAL_HOME}")
    if airflow("db", "migrate") != 0:
        console.print("[red]airflow db migrate failed[/red]")
        return 1
    # dag_run.conf in the run description's sections (core.definition.description.run), laid over the DAG's form field by field.
    runs = [("emergency checkpointing", {"checkpointing": {"run_name": "mtc-demo"}})]
    if args.baseline:
        runs.append(("persistent-only baseline", {"checkpointing": {"run_name": "mtc-demo-baseline",
                                                                    "enable_emergency_checkpoint": False}}))
    results = []
    for label, conf in runs:
        run_name = conf["checkpointing"]["run_name"]
        if args.steps:
            conf["checkpointing"]["steps"] = args.steps
        rc, wall_s = run_dag(conf, label)
        summary = summarize(run_name, wall_s)
        print_summary(f"{label} ({run_name})", summary)
        print_run_view(summary.get("run_id"))
        (DEMO / f"{run_name}-summary.json").write_text(json.dumps(summary, indent=2, default=str))
        results.append((label, rc, summary))
    if len(results) == 2:
        (_, _, ours), (_, _, base) = results
        lost = lambda s: sum(f["steps_lost"] or 0 for f in s["faults"])  # noqa: E731
        table = Table(title="Emergency checkpointing vs persistent-only")
        for column in ("", "emergency", "persistent-only", "ratio"):
            table.add_column(column)
        table.add_row("steps lost", str(lost(ours)), str(lost(base)),
                      f"{lost(ours) / lost(base):.2f}" if lost(base) else "-")
        table.add_row("wall time s", f"{ours['wall_s']:.0f}", f"{base['wall_s']:.0f}", f"{ours['wall_s'] / base['wall_s']:.2f}")
        g1, g2 = ours["goodput"].get("goodput"), base["goodput"].get("goodput")
        if g1 and g2:
            table.add_row("goodput", f"{100 * g1:.1f}%", f"{100 * g2:.1f}%", f"{g1 / g2:.2f}")
        console.print(table)
    failed = [label for label, rc, summary in results if rc != 0 or "success" not in summary["run_state"]]
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/red] (see the logs under {DEMO})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
