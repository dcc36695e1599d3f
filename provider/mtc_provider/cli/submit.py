"""`mtc run FILE`: trigger the training DAG with a run description through Airflow's REST API.

The file is validated here first with the function the DAG's plan task and `mtc plan` call (core.definition.description.run.parse_run):
a bad value exits 2 naming the field, and no request is sent. Then `POST /api/v2/dags/{dag_id}/dagRuns` (Airflow 3's
public API, `TriggerDAGRunPostBody`: `logical_date` null, `conf` the description) starts a run; its URL in the UI is
printed; `--wait` follows it to its end (exit 0 success, 1 failed, 3 timed out: cli.console's codes, as `status` and
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

import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from mtc_provider.cli.airflow_api import AirflowApi, AirflowApiError, env
from mtc_provider.cli.console import WaitProgress, err_console, fail, guarded, load_data, out as out_console, timed_out
from mtc_provider.core.basics.errors import SpecError

TRAINING_DAG_ID = "mtc_resilient_training"
ENDED = ("success", "failed")


def run_conf(description: Any, local_home: str | None) -> dict[str, Any]:
    """The dag_run.conf for a description: validated (core.definition.description.run.parse_run, as the DAG's plan task does), then every
    field explicit (the DAG lays the conf over its form, so what the file leaves out must not take the form's
    values), except a local base_output_directory the file left out: the server derives it from its own home."""
    from mtc_provider.core.definition.description.run import parse_run

    config = parse_run(description, local_home)
    # A section the file has not (None: cluster or bucket on the local target) is left out: the form's is the same
    # (none, or the default bucket), and Airflow refuses None for an object param.
    conf = {key: value for key, value in config.to_dict().items() if value is not None}
    given = description.get("checkpointing") if isinstance(description, dict) else None
    from mtc_provider.core.basics.kind_rules import rules_for

    if rules_for(config.target).local_processes and not (isinstance(given, dict) and given.get("base_output_directory")):
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
    from mtc_provider.target import default_local_home

    conf = guarded(lambda: run_conf(load_data(config), default_local_home()))  # nothing is sent when invalid
    url = api_url or env("AIRFLOW_API_URL", "AIRFLOW_URL")
    if not url:
        fail(str(SpecError("--api-url", None, "Airflow's API server URL, or $AIRFLOW_API_URL")))
    if not url.startswith(("http://", "https://")):
        fail(str(SpecError("--api-url", url, "an http:// or https:// URL, e.g. http://127.0.0.1:8080")))
    api = AirflowApi(url, api_token or env("AIRFLOW_CLI_TOKEN", "AIRFLOW_TOKEN"),
                     username or env("AIRFLOW_USERNAME"), password or env("AIRFLOW_PASSWORD"))
    out, err = out_console(), err_console()
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
