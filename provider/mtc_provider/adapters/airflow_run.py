"""What Airflow recorded about one training run, read inside the api-server through Airflow's own models.

The run view's only reader (plugins/run_view.py): the run's task instances and their tries (TaskInstance,
TaskInstanceHistory), the XComs the provider pushed (XComModel, on the session the request's FastAPI dependency
opened), and, on the local target, the workload's event files and the checkpoint folder on this machine. No
second database, no cluster or bucket client: what Airflow does not hold, the view does not show.
"""

from __future__ import annotations

import json
import os
import stat
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


CHECKPOINTS, EVENTS = "checkpoints", "events"
# The run ledger (core.attempt.ledger.RunLedger's dict form): the launch task's XCom, and the same dict under this
# key in the run record beside the checkpoints (read on the local target, where a new try cleared the XCom)
LEDGER_XCOM_KEY = "ledger"
RECORD_LIMIT = 4 * 1024 * 1024  # bytes of `mtc-attempts.json` read (a record of thousands of attempts is < 1 MB)
EVENTS_LIMIT = 64 * 1024 * 1024  # bytes of one event file read (one line a step: millions of steps)


def run_folder(checkpoint_dir: str | None, dag_id: str) -> Path | None:
    """The run's own folder on this machine, `<base>/<run_name>` for `<base>/<run_name>/checkpoints`, when the view
    may read it for a user authorized for `dag_id`; else None.

    An XCom names the checkpoint folder, and a user who may write one DAG's XComs could name another DAG's. So the
    folder is read only when it lies under `[mtc] run_view_file_roots` (no link on the way: adapters/file_roots.py)
    and its run record, `mtc-attempts.json`, which this DAG's launch operator writes beside `checkpoints/` at every
    submission (adapters/run_records.py), names this DAG. The record is the one the operator wrote, not an
    XCom: nothing a user sets through Airflow's API.
    """
    from mtc_provider.adapters.file_roots import NotServed, child, is_dir, open_under, read_text
    from mtc_provider.core.attempt.run_summary import RECORD_FILE

    folder = local_dir(checkpoint_dir)
    if folder is None or folder.name != CHECKPOINTS or folder.parent == folder:
        return None
    try:
        fd = open_under(folder.parent)
    except NotServed:
        return None
    try:
        if not is_dir(fd):
            return None
        text = read_text(child(fd, RECORD_FILE), limit=RECORD_LIMIT)
    except NotServed:
        return None
    finally:
        os.close(fd)
    try:
        record = json.loads(text)
    except ValueError:
        return None
    owner = record.get("dag_run") if isinstance(record, Mapping) else None
    return folder.parent if isinstance(owner, Mapping) and owner.get("dag_id") == dag_id else None


def read_airflow_run(session: Any, dag_id: str, run_id: str, live_reads: bool = True) -> RunFacts | None:
    """The run's records, or None when Airflow has no such DAG run. `live_reads`: also the watched JobSet's pods and
    log lines and the local run folder's files (the run's own page); off, Airflow's database only (the runs list)."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel

    from mtc_provider.adapters.attempt_journal import (ATTEMPTS_XCOM_KEY, PROGRESS_XCOM_KEY, RUN_XCOM_KEY,
                                                       XCOM_KEY as JOBSET_XCOM_KEY)
    from mtc_provider.core.attempt.attempt_records import read_attempts

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
        records.attempts = read_attempts(xcoms.get((launch.task_id, ATTEMPTS_XCOM_KEY)),
                                         f"the {ATTEMPTS_XCOM_KEY} XCom of task {launch.task_id}")
        progress = xcoms.get((launch.task_id, PROGRESS_XCOM_KEY))
        records.progress = progress if isinstance(progress, Mapping) else None
        ledger = xcoms.get((launch.task_id, LEDGER_XCOM_KEY))
        records.ledger = ledger if isinstance(ledger, Mapping) else None
        jobset = xcoms.get((launch.task_id, JOBSET_XCOM_KEY))
        records.jobset = jobset if isinstance(jobset, Mapping) else None
        described = xcoms.get((launch.task_id, RUN_XCOM_KEY))
        if not isinstance(described, Mapping):  # a new try before its launch (its XComs were just cleared)
            described = rendered_run(session, launch)
        records.checkpoint_dir = described.get("checkpoint_dir")
        target = described.get("target_step")
        records.target_step = target if isinstance(target, int) and not isinstance(target, bool) else None
    if launch is not None and live_reads:
        read_watched_jobset(session, launch, records)
    if goodput_ti is not None:
        report = xcoms.get((goodput_ti.task_id, "return_value"))
        records.goodput = report if isinstance(report, Mapping) else None
    names = link_names()
    for (task_id, key), value in sorted(xcoms.items()):
        if key in names and isinstance(value, str) and value:
            records.links[names[key]] = value
    if live_reads:
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
        from mtc_provider.core.definition.description.spec import CheckpointingSpec

        try:
            out["checkpoint_dir"] = CheckpointingSpec(**checkpointing).checkpoint_directory
        except (TypeError, ValueError):  # not a spec this version reads: the page shows less, never a 500
            pass
    target = fields.get("target_step")
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        out["target_step"] = int(target)
    return out


def read_local_files(records: RunFacts) -> None:
    """On the local target the api-server sees the run's files: the workload's events and the finalized steps of
    the checkpoint folder, read from the run's own folder only (`run_folder`), each file opened once without
    following links."""
    from mtc_provider.adapters.file_roots import NotServed, child, entries, open_under, read_text
    from mtc_provider.adapters.workload_events import events_from_text

    folder = run_folder(records.checkpoint_dir, records.dag_id)
    if folder is None:
        return
    events: list[dict] = []
    try:
        events_fd = open_under(folder, below=(EVENTS,))
    except NotServed:
        events_fd = None
    if events_fd is not None:
        try:
            for name, info in sorted(entries(events_fd)):
                if name.endswith(".jsonl") and stat.S_ISREG(info.st_mode):
                    try:
                        events.extend(events_from_text(read_text(child(events_fd, name), EVENTS_LIMIT)))
                    except NotServed:
                        continue
        finally:
            os.close(events_fd)
    events.sort(key=lambda e: float(e.get("ts", 0.0)))
    records.events = events
    if records.ledger is None:
        records.ledger = recorded_ledger(folder)
    records.persistent_steps = finalized_steps(folder)


def recorded_ledger(folder: Path) -> Mapping[str, Any] | None:
    """The run record's ledger (`mtc-attempts.json`, key "ledger"), read without following links; None when absent."""
    from mtc_provider.adapters.file_roots import NotServed, child, open_under, read_text
    from mtc_provider.core.attempt.run_summary import RECORD_FILE

    try:
        fd = open_under(folder)
    except NotServed:
        return None
    try:
        record = json.loads(read_text(child(fd, RECORD_FILE), limit=RECORD_LIMIT))
    except (NotServed, ValueError):
        return None
    finally:
        os.close(fd)
    ledger = record.get(LEDGER_XCOM_KEY) if isinstance(record, Mapping) else None
    return ledger if isinstance(ledger, Mapping) else None


def finalized_steps(folder: Path) -> list[int] | None:
    """The committed steps of `<run folder>/checkpoints` (a step folder holding Orbax's commit marker), read
    without following links; None when the folder cannot be read."""
    from mtc_provider.adapters.file_roots import NotServed, child, entries, open_under
    from mtc_provider.core.measure.listing import COMMIT_FILE, step_of_dir

    try:
        fd = open_under(folder, below=(CHECKPOINTS,))
    except NotServed:
        return None
    steps = []
    try:
        for name, info in entries(fd):
            step = step_of_dir(name)
            if step is None or not stat.S_ISDIR(info.st_mode):
                continue
            try:
                step_fd = child(fd, name, directory=True)
            except NotServed:
                continue
            try:
                os.stat(COMMIT_FILE, dir_fd=step_fd, follow_symlinks=False)
                steps.append(step)
            except OSError:
                continue  # uncommitted: a save in progress or one that died
            finally:
                os.close(step_fd)
    finally:
        os.close(fd)
    return sorted(steps)
