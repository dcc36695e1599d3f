"""Helpers of the run view tests (tests/plugins/): what the launch operator leaves on disk and in the cluster, and
a deferred launch try as Airflow holds it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.doubles.kubernetes import KubernetesApiDouble

CONN = "k8s_run_view"
TRIGGER = "mtc_provider.triggers.jobset.JobSetTrigger"


def write_record(run_folder: Path, dag_id: str, run_id: str = "manual", task_id: str = "train") -> None:
    """The run record the launch operator writes beside `checkpoints/` at each submission (adapters/run_records.py),
    as core.attempt.run_summary.run_record makes it."""
    from mtc_provider.core.attempt.run_summary import RECORD_FILE, RUNNING, run_record

    run_folder.mkdir(parents=True, exist_ok=True)
    record = run_record(run_name=run_folder.name, namespace="default", checkpoint_dir=str(run_folder / "checkpoints"),
                        target_step=100, state=RUNNING, attempts=[], now=0.0,
                        owner={"dag_id": dag_id, "run_id": run_id, "task_id": task_id})
    (run_folder / RECORD_FILE).write_text(json.dumps(record))


def run_pod(cluster: KubernetesApiDouble, name: str, dag_id: str, run_id: str, jobset: str, task_id: str = "train",
            job_index: int = 0, host: int = 0) -> None:
    """A running pod of a JobSet the launch operator created: the JobSet controller's labels and the run labels the
    operator puts on the pod template (core.definition.render.jobset_manifest, core.basics.labels.run_labels)."""
    from mtc_provider.core.basics.labels import run_labels

    from tests.adapters.test_js_pod_logs import add_pod

    add_pod(cluster, name, job_index, host, jobset=jobset)
    cluster.pods[-1]["metadata"]["labels"].update(run_labels(dag_id, run_id, task_id, "r"))


def defer(dag_id: str, run_id: str, jobset: str, task_id: str = "train", state: str = "deferred",
          classpath: str = TRIGGER) -> None:
    """The launch try as Airflow holds a deferred one: its trigger row (the JobSetTrigger's kwargs) and state."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    with create_session() as session:
        trigger = Trigger(classpath=classpath, kwargs={
            "connection": {"kind": "kubernetes", "kubernetes_conn_id": CONN}, "namespace": "default",
            "name": jobset})
        session.add(trigger)
        session.flush()
        ti = session.scalar(select(TaskInstance).where(TaskInstance.dag_id == dag_id,
                                                       TaskInstance.run_id == run_id, TaskInstance.task_id == task_id))
        ti.state, ti.trigger_id, ti.end_date = state, trigger.id, None
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        run.state, run.end_date = "running", None
