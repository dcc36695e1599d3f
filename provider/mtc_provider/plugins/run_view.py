"""The training-run view: an Airflow 3 plugin (a FastAPI app inside the api-server, plus a page).

Registered through the provider's own metadata: the `airflow.plugins` entry point in pyproject.toml, which Airflow
loads with its default settings (the `plugins` key of get_provider_info is read only with `[core]
lazy_discover_providers = False`; see get_provider_info.py). Airflow 3.3 mounts `fastapi_apps` under their
`url_prefix` and shows `external_views` in an iframe: one in the navigation ("Training runs"), one as a tab of a
DAG run, one as a tab of a task instance (`{DAG_ID}`, `{RUN_ID}`, `{TASK_ID}` filled in by the UI).

Every route needs Airflow's own login (the UI's JWT cookie, or a bearer token from `POST /auth/token`) and the
auth manager's read access to the DAG's runs and XComs (`airflow.api_fastapi.core_api.security`). It reads the
run through Airflow's models (adapters/airflow_run.py), never a database of its own; on the local target it also
serves the run's checkpoint folder and goodput chart over http, because Airflow's UI draws no file:// links.
"""

from __future__ import annotations

import html
import mimetypes
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from mtc_provider.core.view.run_page import LAUNCH_OPERATOR
from mtc_provider.links.run_view import PREFIX, run_path

PAGE = Path(__file__).with_name("run_view.html")
LIST_LIMIT = 50


def _read_access():
    """Read access to the DAG's runs and their XComs (the dag_id comes from the path)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return [Depends(requires_access_dag("GET", DagAccessEntity.RUN)),
            Depends(requires_access_dag("GET", DagAccessEntity.XCOM))]


def _session_dep():
    from airflow.api_fastapi.common.db.common import _get_session

    return _get_session


def _user_dep():
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


def _records(session, dag_id: str, run_id: str):
    from mtc_provider.adapters.airflow_run import read_airflow_run

    from mtc_provider.adapters.file_roots import FileRootsError
    from mtc_provider.core.basics.errors import SpecError

    try:
        records = read_airflow_run(session, dag_id, run_id)
    except (FileRootsError, SpecError) as exc:  # the deployment's setting, or a record it cannot read, said as such
        raise HTTPException(500, str(exc)) from None
    if records is None:
        raise HTTPException(404, f"DAG run {dag_id}/{run_id} not found")
    return records


def create_app() -> FastAPI:
    app = FastAPI(title="MTC training runs", docs_url=None, redoc_url=None, openapi_url=None)
    read = _read_access()
    session_dep, user_dep = _session_dep(), _user_dep()

    @app.get("/", response_class=HTMLResponse)
    def runs_list(user=Depends(user_dep), session=Depends(session_dep)) -> HTMLResponse:
        """Recent runs of DAGs with a launch task that this user may read, each with the figures its page shows
        (core.view.run_list), from Airflow's database only: no cluster or file read per row."""
        from sqlalchemy import select

        from airflow.api_fastapi.app import get_auth_manager
        from airflow.models.taskinstance import TaskInstance

        from mtc_provider.adapters.airflow_run import read_airflow_run
        from mtc_provider.core.basics.errors import SpecError
        from mtc_provider.core.view.run_list import COLUMNS, run_row

        readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
        rows = session.execute(
            select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.start_date)
            .where(TaskInstance.operator == LAUNCH_OPERATOR, TaskInstance.dag_id.in_(readable))
            .order_by(TaskInstance.start_date.desc().nullslast()).limit(LIST_LIMIT)).all()
        items = []
        for r in rows:
            figures = dict.fromkeys(COLUMNS, "")
            try:
                records = read_airflow_run(session, r.dag_id, r.run_id, live_reads=False)
            except SpecError as exc:  # one run's unreadable record is said in its row, the others still shown
                figures["state"] = f"not readable: {exc}"
            else:
                figures = run_row(records) if records is not None else figures
            cells = "".join(f"<td data-column='{html.escape(c)}'>{html.escape(figures[c])}</td>" for c in COLUMNS)
            link = html.escape(_root_path() + run_path(r.dag_id, r.run_id))
            items.append(f"<tr data-run='{html.escape(r.run_id)}'><td><a href='{link}' target='_top'>"
                         f"{html.escape(r.dag_id)}</a></td><td>{html.escape(r.run_id)}</td>{cells}"
                         f"<td>{_utc(r.start_date)}</td></tr>")
        head = "".join(f"<th>{html.escape(c)}</th>" for c in ("DAG", "run", *COLUMNS, "started (UTC)"))
        body = (f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(items)}</tbody></table>" if rows
                else "<p>No training runs yet: trigger a DAG with an MtcJobSetOperator task.</p>")
        return HTMLResponse(f"<!doctype html><html><head><meta charset='utf-8'><title>Training runs</title>"
                            f"<style>{LIST_STYLE}</style></head><body><h1>Training runs</h1>{body}</body></html>")

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=read)
    def run_page(dag_id: str, run_id: str, task: str | None = Query(default=None),
                 session=Depends(session_dep)) -> HTMLResponse:
        """The live page for a run with a launch task (its launch task's tab); anywhere else a static note
        without a script, so an unrelated run's tab never polls (Airflow 3.3's UI shows the tab on every run)."""
        launch = _launch_task_id(session, dag_id, run_id)
        if launch is None or (task is not None and task != launch):
            return HTMLResponse(_not_a_training_page(dag_id, run_id, launch, task))
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/api/runs/{dag_id}/{run_id}", dependencies=read)
    def run_json(dag_id: str, run_id: str, session=Depends(session_dep)) -> JSONResponse:
        from mtc_provider.core.view.run_page import run_view

        records = _records(session, dag_id, run_id)
        view = run_view(records)
        base = _root_path() + run_path(dag_id, run_id)
        if _served_folder(records) is not None:  # the run's own local folder, under [mtc] run_view_file_roots
            view["folder_url"] = base + "/files/checkpoints/"
        missing = _chart_missing()
        view["chart_url"] = base + "/chart.png" if not missing and _chart_available(records) else None
        view["chart_missing"] = missing  # the page says which extra draws the chart, never a broken image
        for row in view["attempts"]:  # each attempt's log: its own try's
            row["log_url"] = _root_path() + row["log_path"] if row.get("log_path") else None
        view["airflow_url"] = f"{_root_path()}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
        return JSONResponse(view, headers={"Cache-Control": "no-store"})

    @app.get("/runs/{dag_id}/{run_id}/files/checkpoints/{path:path}", dependencies=read)
    def checkpoint_files(dag_id: str, run_id: str, path: str, request: Request,
                         session=Depends(session_dep)) -> Response:
        """The run's local checkpoint folder: a directory listing, or a file in it, each opened once from the
        root's descriptor without following links, and served from that descriptor (adapters/file_roots.py)."""
        from mtc_provider.adapters.airflow_run import CHECKPOINTS
        from mtc_provider.adapters.file_roots import NotServed, chunks, is_dir, open_under

        records = _records(session, dag_id, run_id)
        folder = _served_folder(records)
        if folder is None:  # the XCom may name any folder, another DAG's too: only the run's own is served
            raise HTTPException(404, f"run {dag_id}/{run_id} has no checkpoint folder this view serves "
                                     f"(checkpoint_dir {records.checkpoint_dir!r}: not this DAG's run folder under "
                                     "[mtc] run_view_file_roots); on GKE use the Cloud Console link")
        parts = tuple(p for p in path.split("/") if p)
        try:
            fd = open_under(folder, below=(CHECKPOINTS, *parts))
        except NotServed:
            raise HTTPException(404, f"{path!r} is not in the run's checkpoint folder") from None
        if is_dir(fd):
            if path and not path.endswith("/"):
                os.close(fd)
                return Response(status_code=307, headers={"Location": request.url.path + "/"})
            return HTMLResponse(_listing(fd, folder / CHECKPOINTS / "/".join(parts), path))
        size = os.fstat(fd).st_size  # what is sent is this descriptor's file, whatever the path names meanwhile
        media = mimetypes.guess_type(parts[-1])[0] or "application/octet-stream"
        return StreamingResponse(chunks(fd), media_type=media, headers={"Content-Length": str(size)})

    @app.get("/runs/{dag_id}/{run_id}/chart.png", dependencies=read)
    def chart(dag_id: str, run_id: str, session=Depends(session_dep)) -> Response:
        """The run's chart, drawn here from the run's data on every target (never a file the XCom names): the
        steps, saves of both tiers, restores and faults, titled with the summary's goodput and wall time."""
        records = _records(session, dag_id, run_id)
        try:
            png = _draw(records)
        except ImportError as exc:  # matplotlib is the `chart` extra
            raise HTTPException(404, str(exc)) from None
        if png is None:
            raise HTTPException(404, f"no goodput chart for run {dag_id}/{run_id} yet (no attempt recorded)")
        return Response(png, media_type="image/png", headers={"Cache-Control": "no-store"})

    return app


def _launch_task_id(session, dag_id: str, run_id: str) -> str | None:
    """The run's launch task (an MtcJobSetOperator task instance), or None: one indexed query, no XCom read."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance

    return session.scalar(select(TaskInstance.task_id).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
        TaskInstance.operator == LAUNCH_OPERATOR).limit(1))


def _not_a_training_page(dag_id: str, run_id: str, launch: str | None, task: str | None) -> str:
    if launch is None:
        what = (f"DAG run {html.escape(dag_id)} / {html.escape(run_id)} has no MtcJobSetOperator task: "
                "there is no training run to show here.")
    else:
        link = html.escape(_root_path() + run_path(dag_id, run_id))
        what = (f"Task {html.escape(task or '')} is not this run's launch task; the training run is "
                f"<a href='{link}' target='_top'>the run of task {html.escape(launch)}</a>.")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Training run</title><style>{LIST_STYLE}"
            f"</style></head><body><p data-testid='not-a-training-run'>{what}</p></body></html>")


def _chart_missing() -> str | None:
    """What to install for the chart when this api-server lacks matplotlib (the `chart` extra), else None."""
    import importlib.util

    from mtc_provider.core.basics.install import install_line

    if importlib.util.find_spec("matplotlib") is not None:
        return None
    return f"the goodput chart needs matplotlib on the api-server: the `chart` extra ({install_line('chart')})"


def _chart_available(records) -> bool:
    from mtc_provider.core.view.run_page import chart_data

    return chart_data(records) is not None


def _draw(records) -> bytes | None:
    """The run's chart: the ledger's intervals, steps, loss, saves by tier, restores and interruptions when the run
    has a ledger (core.view.run_page.chart_data), else the timeline the api-server can rebuild."""
    from mtc_provider.core.view.goodput import compute_goodput
    from mtc_provider.core.view.run_page import chart_data, chart_title, goodput_view
    from mtc_provider.operators.goodput import chart_span, render_chart

    found = chart_data(records)
    if found is None:
        return None
    timeline, marks = found
    report = compute_goodput(timeline)
    summary = goodput_view(records) or report.to_payload()
    start, end = chart_span(timeline)
    with tempfile.TemporaryDirectory(prefix="mtc-chart-") as tmp:
        path = os.path.join(tmp, "goodput.png")
        render_chart(timeline, report, path, title=chart_title(summary, {"start": start, "end": end}), **marks)
        return Path(path).read_bytes()


def _served_folder(records) -> Path | None:
    """The run's own local folder (adapters/airflow_run.run_folder), or None; a refused `[mtc]
    run_view_file_roots` is the deployment's error, said as such (500 naming the setting)."""
    from mtc_provider.adapters.airflow_run import run_folder
    from mtc_provider.adapters.file_roots import FileRootsError

    try:
        return run_folder(records.checkpoint_dir, records.dag_id)
    except FileRootsError as exc:
        raise HTTPException(500, str(exc)) from None


def _listing(dir_fd: int, folder: Path, path: str) -> str:
    """An opened folder's entries (closes it): names, sizes and times of the entries themselves (lstat), a link
    shown as a link and never followed."""
    import stat as st

    from mtc_provider.adapters.file_roots import entries

    try:
        found = entries(dir_fd)
    finally:
        os.close(dir_fd)
    rows = []
    if path.strip("/"):
        rows.append("<tr><td><a href='../'>../</a></td><td></td><td></td></tr>")
    for name, info in sorted(found, key=lambda e: (not st.S_ISDIR(e[1].st_mode), e[0])):
        folder_entry = st.S_ISDIR(info.st_mode)
        shown = name + ("/" if folder_entry else " (link, not served)" if st.S_ISLNK(info.st_mode) else "")
        size = "" if folder_entry else f"{info.st_size:,}"
        link = f"<a href='{quote(name + ('/' if folder_entry else ''))}'>{html.escape(shown)}</a>"
        rows.append(f"<tr><td>{link}</td><td>{size}</td>"
                    f"<td>{_utc(datetime.fromtimestamp(info.st_mtime, tz=timezone.utc))}</td></tr>")
    title = html.escape(str(folder))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{LIST_STYLE}</style>"
            f"</head><body><h1>{title}</h1><table><thead><tr><th>name</th><th>bytes</th><th>modified (UTC)</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></body></html>")


def _utc(value: datetime | None) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if value else ""


def _root_path() -> str:
    """The api-server's path prefix from `[api] base_url` ('' at the root), for links inside the pages."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


LIST_STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1a202c}table{border-collapse:collapse}"
              "td,th{padding:.3rem .8rem;border-bottom:1px solid #e2e8f0;text-align:left}"
              "h1{font-size:1.2rem}")


class LazyApp:
    """The ASGI app, built on its first request: every Airflow component loads plugins (the scheduler, the
    triggerer, task processes), and only the api-server should pay for FastAPI and Airflow's API modules."""

    def __init__(self) -> None:
        self._app: FastAPI | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = create_app()
        await self._app(scope, receive, send)

    def __repr__(self) -> str:
        return f"{__name__}.create_app"


class MtcRunViewPlugin(AirflowPlugin):
    """The provider's plugin: the run view app and its three places in Airflow's UI."""

    name = "mtc_run_view"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": PREFIX, "name": "MTC training runs"}]
    external_views = [
        {"name": "Training runs", "href": f"{PREFIX}/", "destination": "nav", "url_route": "mtc-training-runs",
         "category": "browse"},
        # `applies_to` (apache/airflow PR #69148): a UI that reads it shows these tabs only where an
        # MtcJobSetOperator task is; Airflow 3.3.2's UI passes it through unread (ExternalViewResponse allows extra
        # keys) and shows the tabs everywhere, so the page itself stays static and silent there (run_page).
        {"name": "Training run", "href": f"{PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}", "destination": "dag_run",
         "url_route": "mtc-training-run", "applies_to": {"operators": [LAUNCH_OPERATOR]}},
        {"name": "Training run", "href": f"{PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}?task={{TASK_ID}}",
         "destination": "task_instance", "url_route": "mtc-training-run-task",
         "applies_to": {"operators": [LAUNCH_OPERATOR]}},
    ]
