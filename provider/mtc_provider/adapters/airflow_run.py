"""What Airflow recorded about one training run, read inside the api-server through Airflow's own models.

The run view's only reader (plugins/run_view.py): the run's task instances and their tries (TaskInstance,
TaskInstanceHistory), the XComs the provider pushed (XComModel, on the session the request's FastAPI dependency
opened), and, on the local target, the workload's event files and the checkpoint folder on this machine. No
second database, no cluster or bucket client: what Airflow does not hold, the view does not show.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from mtc_provider.core.view.run_page import GOODPUT_OPERATOR, LAUNCH_OPERATOR, RunFacts, Try



def link_names() -> dict[str, str]:
    """XCom key -> link name of every extra link the provider stores (links/*.py)."""
    from mtc_provider.links.goodput import GoodputChartLink
    from mtc_provider.links.jobset import JOBSET_LINKS

    return {link.key: link.name for link in (*JOBSET_LINKS, GoodputChartLink())}


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _value(row: Any) -> Any:
    from airflow.models.xcom import XComModel

    try:
        return XComModel.deserialize_value(row)
    except Exception:  # noqa: BLE001 - a value the page cannot read is shown as missing, never a 500
        return None


def local_dir(path: str | None) -> Path | None:
    """The directory for a local checkpoint path (absolute or file://), or None for gs:// and the like."""
    if not path:
        return None
    path = path[len("file://"):] if path.startswith("file://") else path
    return Path(path) if path.startswith("/") else None


def events_dir_for(checkpoint_dir: str | None) -> Path | None:
    """The local workload's events folder: `<base>/<run>/events` beside `<base>/<run>/checkpoints`."""
    folder = local_dir(checkpoint_dir)
    return folder.parent / "events" if folder is not None else None


def read_airflow_run(session: Any, dag_id: str, run_id: str) -> RunFacts | None:
    """The run's records, or None when Airflow has no such DAG run."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel

    from mtc_provider.adapters.attempt_journal import (ATTEMPTS_XCOM_KEY, PROGRESS_XCOM_KEY, RUN_XCOM_KEY,
                                                       XCOM_KEY as JOBSET_XCOM_KEY)

    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if run is None:
        return None
    tis = list(session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id,
                                                          TaskInstance.run_id == run_id)))
    launch = next((ti for ti in tis if ti.operator == LAUNCH_OPERATOR), None)
    goodput_ti = next((ti for ti in tis if ti.operator == GOODPUT_OPERATOR), None)
    xcoms: dict[tuple[str, str], Any] = {}
    for row in session.scalars(select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id)):
        xcoms[(row.task_id, row.key)] = _value(row)
    records = RunFacts(dag_id=dag_id, run_id=run_id, run_state=str(run.state) if run.state else None,
                       now=time.time(), run_start=_epoch(run.start_date), run_end=_epoch(run.end_date))
    if launch is not None:
        records.launch_task_id = launch.task_id
        history = session.scalars(select(TaskInstanceHistory).where(
            TaskInstanceHistory.dag_id == dag_id, TaskInstanceHistory.run_id == run_id,
            TaskInstanceHistory.task_id == launch.task_id))
        tries = {h.try_number: Try(h.try_number, h.state, _epoch(h.start_date), _epoch(h.end_date)) for h in history}
        if launch.try_number:
            tries[launch.try_number] = Try(launch.try_number, launch.state, _epoch(launch.start_date),
                                           _epoch(launch.end_date))
        records.tries = [tries[n] for n in sorted(tries)]
        attempts = xcoms.get((launch.task_id, ATTEMPTS_XCOM_KEY))
        records.attempts = list(attempts) if isinstance(attempts, list) else []
        progress = xcoms.get((launch.task_id, PROGRESS_XCOM_KEY))
        records.progress = progress if isinstance(progress, Mapping) else None
        jobset = xcoms.get((launch.task_id, JOBSET_XCOM_KEY))
        records.jobset = jobset if isinstance(jobset, Mapping) else None
        described = xcoms.get((launch.task_id, RUN_XCOM_KEY))
        if not isinstance(described, Mapping):  # a new try before its launch (its XComs were just cleared)
            described = rendered_run(session, launch)
        records.checkpoint_dir = described.get("checkpoint_dir")
        target = described.get("target_step")
        records.target_step = target if isinstance(target, int) and not isinstance(target, bool) else None
    if launch is not None:
        read_watched_jobset(session, launch, records)
    if goodput_ti is not None:
        report = xcoms.get((goodput_ti.task_id, "return_value"))
        records.goodput = report if isinstance(report, Mapping) else None
    names = link_names()
    for (task_id, key), value in sorted(xcoms.items()):
        if key in names and isinstance(value, str) and value:
            records.links[names[key]] = value
    read_local_files(records)
    return records


def read_watched_jobset(session: Any, launch: Any, records: RunFacts) -> None:
    """While the launch task is deferred: its JobSet's pods and the leader's step lines, read now
    (adapters/run_cluster.py), so the step moves at the page's pace on GKE and any Kubernetes cluster."""
    from mtc_provider.adapters.run_cluster import read_cluster, watched_jobset

    if str(launch.state or "") != "deferred":
        return
    watch = watched_jobset(session, launch)
    if watch is None:
        return
    records.cluster = read_cluster(watch)
    records.log_steps = list(records.cluster.get("log_steps") or [])


def rendered_run(session: Any, ti: Any) -> dict[str, Any]:
    """checkpoint_dir and target_step from the launch task's rendered fields (Airflow keeps the last try's, while a
    new try's XComs are cleared at its start): `checkpointing` {base_output_directory, run_name}, `target_step`."""
    from sqlalchemy import select

    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF

    fields = session.scalar(select(RTIF.rendered_fields).where(
        RTIF.dag_id == ti.dag_id, RTIF.task_id == ti.task_id, RTIF.run_id == ti.run_id,
        RTIF.map_index == ti.map_index)) or {}
    out: dict[str, Any] = {}
    checkpointing = fields.get("checkpointing")
    if isinstance(checkpointing, Mapping):  # the planned spec, as dataclasses.asdict wrote it
        from mtc_provider.core.definition.spec import CheckpointingSpec

        try:
            out["checkpoint_dir"] = CheckpointingSpec(**checkpointing).checkpoint_directory
        except (TypeError, ValueError):  # not a spec this version reads: the page shows less, never a 500
            pass
    target = fields.get("target_step")
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        out["target_step"] = int(target)
    return out


def read_local_files(records: RunFacts) -> None:
    """On the local target the api-server sees the run's files: the workload's events and the checkpoint folder,
    when they are under the run view's file roots (a `checkpoint_dir` XCom may name any folder)."""
    from mtc_provider.adapters.file_roots import allowed

    folder = local_dir(records.checkpoint_dir)
    if folder is None or allowed(folder) is None:
        return
    from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
    from mtc_provider.adapters.workload_events import read_events

    events = events_dir_for(records.checkpoint_dir)
    records.events = read_events(events) if events is not None and events.is_dir() else []
    try:
        records.persistent_steps = [info.step for info in LocalCheckpointStore().finalized(str(folder))]
    except OSError:
        records.persistent_steps = None


def chart_path(records_goodput: Mapping[str, Any] | None) -> str | None:
    """The goodput task's PNG on this machine, when it wrote one locally under the run view's file roots (the XCom
    may name any file: only one under a configured root is served, symlinks resolved)."""
    from mtc_provider.adapters.file_roots import allowed

    path = (records_goodput or {}).get("chart_path")
    if not (isinstance(path, str) and path.startswith("/")):
        return None
    resolved = allowed(path)
    return str(resolved) if resolved is not None and resolved.is_file() else None
