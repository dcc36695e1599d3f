"""`mtc run FILE`: trigger the training DAG with a run description through Airflow's REST API.

The file is validated here first with the function the DAG's plan task and `mtc plan` call (core.run.parse_run):
a bad value exits 2 naming the field, and no request is sent. Then `POST /api/v2/dags/{dag_id}/dagRuns` (Airflow 3's
public API, `TriggerDAGRunPostBody`: `logical_date` null, `conf` the description) starts a run; its URL in the UI is
printed; `--wait` follows it to its end (exit 0 success, 1 failed, 3 timed out: cli_runs' codes, as `status` and
`delete`), showing the run's state on stderr while it waits.

A paused DAG queues a triggered run and never starts it, so the DAG is read first: when paused, `mtc run` refuses
(exit 1, nothing triggered) unless `--unpause`, which unpauses it (`PATCH /api/v2/dags/{dag_id}`,
`update_mask=is_paused`) and says so. While `--wait` waits, a run still queued under a DAG paused since is reported
and ends the wait (exit 1) rather than waiting for ever.

Where Airflow is and who asks, as Airflow's own clients take them: `--api-url` or `AIRFLOW_API_URL` (`AIRFLOW_URL`);
a token with `--api-token` or `AIRFLOW_CLI_TOKEN` (`AIRFLOW_TOKEN`), as airflowctl; else `--username`/`--password`
(`AIRFLOW_USERNAME`/`AIRFLOW_PASSWORD`) for a JWT from `POST /auth/token`.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from mtc_provider.core.errors import SpecError

TRAINING_DAG_ID = "mtc_resilient_training"
ENDED = ("success", "failed")
REQUEST_TIMEOUT_S = 30.0


class AirflowApiError(RuntimeError):
    """The API refused or could not be reached: the message names the request and the answer."""


def _env(*names: str) -> str | None:
    import os

    return next((os.environ[name] for name in names if os.environ.get(name)), None)


class AirflowApi:
    """The few calls `mtc run` makes, over the standard library (no client package to install)."""

    def __init__(self, url: str, token: str | None = None, username: str | None = None,
                 password: str | None = None, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._token = token
        self._login = (username, password)

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:1000]
            raise AirflowApiError(f"{method} {self.url}{path} -> HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AirflowApiError(f"{method} {self.url}{path}: Airflow's API is not reachable ({reason})") from None
        return json.loads(text) if text else None

    def token(self) -> str:
        if not self._token:
            username, password = self._login
            if not username or not password:
                raise AirflowApiError("no credentials: --api-token (or AIRFLOW_CLI_TOKEN), or --username and "
                                      "--password (or AIRFLOW_USERNAME and AIRFLOW_PASSWORD)")
            self._token = self._request("POST", "/auth/token", {"username": username, "password": password},
                                        auth=False)["access_token"]
        return self._token

    def dag(self, dag_id: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v2/dags/{urllib.parse.quote(dag_id)}")

    def unpause(self, dag_id: str) -> dict[str, Any]:
        return self._request("PATCH", f"/api/v2/dags/{urllib.parse.quote(dag_id)}?update_mask=is_paused",
                             {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any], note: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"logical_date": None, "conf": conf}
        if note:
            body["note"] = note
        return self._request("POST", f"/api/v2/dags/{urllib.parse.quote(dag_id)}/dagRuns", body)

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v2/dags/{urllib.parse.quote(dag_id)}/dagRuns/"
                                    f"{urllib.parse.quote(run_id, safe='')}")

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of one task instance (Airflow 3: TaskInstanceHistoryCollectionResponse.task_instances)."""
        answer = self._request("GET", f"/api/v2/dags/{urllib.parse.quote(dag_id)}/dagRuns/"
                                      f"{urllib.parse.quote(run_id, safe='')}/taskInstances/"
                                      f"{urllib.parse.quote(task_id)}/tries")
        return list((answer or {}).get("task_instances") or [])

    def ui_url(self, dag_id: str, run_id: str) -> str:
        return f"{self.url}/dags/{urllib.parse.quote(dag_id)}/runs/{urllib.parse.quote(run_id, safe='')}"


def run_conf(description: Any, local_home: str | None) -> dict[str, Any]:
    """The dag_run.conf for a description: validated (core.run.parse_run, as the DAG's plan task does), then every
    field explicit (the DAG lays the conf over its form, so what the file leaves out must not take the form's
    values), except a local base_output_directory the file left out: the server derives it from its own home."""
    from mtc_provider.core.run import parse_run

    config = parse_run(description, local_home)
    # A section the file has not (None: cluster or bucket on the local target) is left out: the form's is the same
    # (none, or the default bucket), and Airflow refuses None for an object param.
    conf = {key: value for key, value in config.to_dict().items() if value is not None}
    given = description.get("checkpointing") if isinstance(description, dict) else None
    if config.target == "local" and not (isinstance(given, dict) and given.get("base_output_directory")):
        conf["checkpointing"]["base_output_directory"] = None
    return conf


def run(
    config: Path = typer.Argument(..., help="Run description (YAML); - reads it from standard input."),
    api_url: str = typer.Option(None, "--api-url", "--url", help="Airflow's API server, e.g. http://127.0.0.1:8080 "
                                "(default: $AIRFLOW_API_URL or $AIRFLOW_URL)."),
    api_token: str = typer.Option(None, "--api-token", "--token", help="A bearer token (default: $AIRFLOW_CLI_TOKEN "
                                  "or $AIRFLOW_TOKEN)."),
    username: str = typer.Option(None, "--username", help="For a token from /auth/token (default: $AIRFLOW_USERNAME)."),
    password: str = typer.Option(None, "--password", help="With --username (default: $AIRFLOW_PASSWORD)."),
    dag_id: str = typer.Option(TRAINING_DAG_ID, "--dag-id", help="The training DAG to trigger."),
    unpause: bool = typer.Option(False, "--unpause", help="Unpause the DAG when it is paused (default: refuse, as a "
                                 "paused DAG's run stays queued)."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the run's end: exit 0 when it succeeded, 1 when not, "
                              "3 at --timeout; its state is shown on stderr meanwhile."),
    timeout: float = typer.Option(0, "--timeout", help="With --wait: give up after this many seconds (exit 3; 0: "
                                  "never)."),
    poll: float = typer.Option(10.0, "--poll", help="With --wait: seconds between state checks."),
) -> None:
    """Validate a run description, then trigger the training DAG with it and print the run's URL in the UI."""
    from mtc_provider.cli import _fail, _guarded, load_data
    from mtc_provider.target import default_local_home

    conf = _guarded(lambda: run_conf(load_data(config), default_local_home()))  # nothing is sent when invalid
    url = api_url or _env("AIRFLOW_API_URL", "AIRFLOW_URL")
    if not url:
        _fail(str(SpecError("--api-url", None, "Airflow's API server URL, or $AIRFLOW_API_URL")))
    if not url.startswith(("http://", "https://")):
        _fail(str(SpecError("--api-url", url, "an http:// or https:// URL, e.g. http://127.0.0.1:8080")))
    api = AirflowApi(url, api_token or _env("AIRFLOW_CLI_TOKEN", "AIRFLOW_TOKEN"),
                     username or _env("AIRFLOW_USERNAME"), password or _env("AIRFLOW_PASSWORD"))
    out, err = Console(file=sys.stdout, soft_wrap=True, highlight=False), Console(file=sys.stderr, soft_wrap=True,
                                                                                  highlight=False)
    try:
        _ready_to_run(api, dag_id, unpause, out)
        created = api.trigger(dag_id, conf, note=f"mtc run {config}")
        run_id = created["dag_run_id"]
        out.print(f"triggered {escape(dag_id)} run {escape(run_id)} "
                  f"(run_name {escape(conf['checkpointing']['run_name'])})")
        out.print(api.ui_url(dag_id, run_id))
        if not wait:
            return
        state = _wait(api, dag_id, run_id, created.get("state"), timeout, poll)
        out.print(f"run {escape(run_id)} ended: {state}")
        if state != "success":
            raise typer.Exit(1)
    except AirflowApiError as exc:
        err.print(f"error: {escape(str(exc))}")
        raise typer.Exit(1) from None


def _ready_to_run(api: AirflowApi, dag_id: str, unpause: bool, out: Console) -> None:
    """The DAG exists and is unpaused (with --unpause: made so); else AirflowApiError saying what to do."""
    try:
        dag = api.dag(dag_id)
    except AirflowApiError as exc:
        if "HTTP 404" in str(exc):
            raise AirflowApiError(f"--dag-id: no DAG {dag_id!r} in Airflow at {api.url} (is the provider's dags folder "
                                  "loaded? the training DAG is mtc_resilient_training)") from None
        raise
    if not dag.get("is_paused"):
        return
    if not unpause:
        raise AirflowApiError(f"DAG {dag_id!r} is paused: a run triggered now would stay queued. Unpause it (the "
                              "toggle in the UI, or `airflow dags unpause " + dag_id + "`), or pass --unpause")
    api.unpause(dag_id)
    out.print(f"unpaused DAG {escape(dag_id)} (--unpause)")


def _wait(api: AirflowApi, dag_id: str, run_id: str, state: str | None, timeout: float, poll: float) -> str:
    """Poll the run until it ends; its state (and how long it waited) on stderr meanwhile. A run still queued
    under a DAG paused meanwhile would never start: AirflowApiError. At --timeout: exit TIMED_OUT."""
    from mtc_provider.cli_runs import WaitProgress, timed_out

    deadline = time.monotonic() + timeout if timeout > 0 else None
    with WaitProgress() as progress:
        while state not in ENDED:
            progress.update(f"run {run_id} {state}")
            if deadline is not None and time.monotonic() > deadline:
                timed_out(f"run {run_id} of {dag_id} still {state} after {timeout:g} s (--timeout)")
            time.sleep(poll)
            state = api.dag_run(dag_id, run_id)["state"]
            if state == "queued" and api.dag(dag_id).get("is_paused"):
                raise AirflowApiError(f"DAG {dag_id!r} was paused while run {run_id} was queued: it will not start "
                                      "until the DAG is unpaused")
    return state
