"""`mtc list`, `mtc status`, `mtc logs`, `mtc delete`: a run's life from a terminal, in xpk's words where they fit
(`xpk workload list` / `xpk workload delete`).

Two sources, both read as the launch operator wrote them:
- the cluster: the run's JobSets (one per attempt, labelled with the run name and the try number) and their pods,
  through the same Kubernetes API the provider uses (a kubeconfig, a GKE cluster, or the local target's home);
- the run's record beside its checkpoints, `<base_output_directory>/<run_name>/mtc-attempts.json`
  (adapters.run_records), which outlives the teardown: `mtc status` and `mtc list` still answer after a run ended.

Every command takes the one connection option set (cli.cluster_options). `mtc delete` deletes JobSets, never
checkpoints or records, and sends who asked (the OS user, host and pid) and why (`user-request`) with each delete.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import typer
from rich.markup import escape

from mtc_provider.cli.airflow_api import AirflowApi, AirflowApiError, env
from mtc_provider.cli.cluster_options import ClusterOptions, cluster_options, guarded_hook, reader_hook
from mtc_provider.cli.console import (ERROR, OUTPUT_OPTION, USAGE_ERROR, Output, WaitProgress, emit, err_console, fail,
                                      out as _out, print_table, timed_out)
from mtc_provider.core.basics.errors import SpecError


def _err(message: str, code: int = ERROR) -> None:
    fail(message, code)


def _api_errors() -> tuple[type[BaseException], ...]:
    """What a read reports and ends with: the cluster's or the store's failures, and a record it cannot read."""
    from mtc_provider.adapters.protocols import ApiError

    return (ApiError, OSError, SpecError)


# --- reading a run -----------------------------------------------------------------------------------------
# A read starts no server: a local folder (a local target's bucket folder included) is read as files, not through
# the home's local GCS; the local target's cluster is asked only when it is already running (cli.cluster_options.reader_hook).
def _read_store(options: ClusterOptions, where: str) -> Any:
    """The store a read lists `where` with: GCS for gs://, the files themselves for a local folder."""
    from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore, open_store

    return open_store(where, options.gcp_conn_id) if where.startswith("gs://") else LocalCheckpointStore()


def _records_at(options: ClusterOptions, where: str) -> Any:
    from mtc_provider.adapters.run_records import RunRecords

    return RunRecords(where, options.gcp_conn_id, store=_read_store(options, where))


def typed_record(record: dict[str, Any]) -> dict[str, Any]:
    """A run's record as read, its attempts typed (core.attempt.attempt_records): SpecError naming the record's field."""
    from mtc_provider.core.attempt.attempt_records import read_attempts
    from mtc_provider.core.attempt.run_summary import RECORD_FILE

    field = f"{RECORD_FILE} of run {record.get('run_name')}: attempts"
    return {**record, "attempts": read_attempts(record.get("attempts"), field)}


def find_record(options: ClusterOptions, run_name: str, checkpoint_dir: str = "") -> dict[str, Any] | None:
    """The run's record (`typed_record`): beside the checkpoint directory its JobSets name, else under each base."""
    from mtc_provider.adapters.run_records import checkpoint_dir_of_run

    candidates = [checkpoint_dir] if checkpoint_dir else []
    candidates += [checkpoint_dir_of_run(base, run_name) for base in options.bases()]
    for where in candidates:
        record = _records_at(options, where).read(where)
        if record is not None:
            return typed_record(record)
    return None


def _commits(options: ClusterOptions, checkpoint_dir: str) -> list[tuple[int, float | None]]:
    store = _read_store(options, checkpoint_dir)
    return [(info.step, info.commit_time) for info in store.finalized_steps(checkpoint_dir)]


def run_status(options: ClusterOptions, run_name: str, hook: Any = None) -> dict[str, Any]:
    """The run's attempts from its record (kept after the teardown) and from its JobSets still in the cluster."""
    from mtc_provider.core.attempt.interruptions import count
    from mtc_provider.core.attempt.run_summary import newest_step

    live: dict[str, Any] = {"attempts": [], "checkpoint_dir": "", "newest_step": None}
    if hook is not None:
        try:
            live = _live_status(options, hook, run_name)
        except _api_errors() as exc:
            if not options.bases():
                raise
            # The run's record answers without the cluster (a run that ended, a cluster that is down).
            err_console().print(
                f"warning: the cluster did not answer ({escape(str(exc))}): showing the run's record only")
            hook = None
    record = find_record(options, run_name, live["checkpoint_dir"])
    in_cluster = {a["name"]: a for a in live["attempts"]}
    attempts: list[dict[str, Any]] = []
    recorded = (record or {}).get("attempts") or []
    for entry in recorded:
        jobset = in_cluster.pop(entry.jobset, None)
        attempts.append({"attempt": entry.attempt, "try": entry.try_number, "name": entry.jobset or None,
                         "phase": jobset["phase"] if jobset else "deleted",
                         "restarts": max(entry.restarts, jobset["restarts"] if jobset else 0),
                         "reason": entry.reason or (jobset or {}).get("reason") or "",
                         "outcome": entry.outcome, "start": entry.start, "end": entry.end,
                         "last_step": entry.last_step, "in_cluster": jobset is not None})
    for jobset in in_cluster.values():  # not in the record (a provider older than the record, or no bucket access)
        attempts.append({**jobset, "outcome": None, "start": None, "end": None, "last_step": None, "in_cluster": True})
    attempts.sort(key=lambda a: (a["attempt"] or 0, a["name"] or ""))
    checkpoint_dir = live["checkpoint_dir"] or (record or {}).get("checkpoint_dir") or ""
    step = live["newest_step"]
    if step is None and checkpoint_dir and not live["checkpoint_dir"]:  # no JobSet left to tell: list the folder
        try:
            step = newest_step({}, [s for s, _ in _commits(options, checkpoint_dir)])
        except Exception as exc:  # noqa: BLE001 - the record's figure stands (no bucket access from here)
            err_console().print(
                f"warning: listing {escape(checkpoint_dir)} failed ({escape(str(exc))}): the record's step is shown")
    if step is None and record is not None:
        step = newest_step(record)
    state = (record or {}).get("state") or ("running" if any(a["phase"] in ("pending", "running", "restarting")
                                                             for a in attempts) else None)
    return {"run_name": run_name, "namespace": (record or {}).get("namespace") or options.namespace, "state": state,
            "reason": (record or {}).get("reason", ""), "target_step": (record or {}).get("target_step"),
            "attempts": attempts, "interruptions": count(recorded), "checkpoint_dir": checkpoint_dir,
            "newest_step": step, "dag_run": (record or {}).get("dag_run"), "recorded": record is not None}


def _live_status(options: ClusterOptions, hook: Any, run_name: str) -> dict[str, Any]:
    """MtcJobSetHook.run_status's answer, the newest step listed as a read lists (no server started)."""
    from mtc_provider.adapters.checkpoint_stores import list_newest

    found = hook.find_by_run(run_name, options.namespace)
    checkpoint_dir = next((a.checkpoint_dir for a in reversed(found) if a.checkpoint_dir), "")
    newest = list_newest(_read_store(options, checkpoint_dir), checkpoint_dir).restorable() if checkpoint_dir else None
    return {"run_name": run_name, "namespace": options.namespace, "attempts": [a.to_dict() for a in found],
            "checkpoint_dir": checkpoint_dir, "newest_step": newest.step if newest else None}


# --- commands ----------------------------------------------------------------------------------------------
def status(
    run_name: str = typer.Argument(..., help="The run name (checkpointing.run_name)."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the run has ended; exit 0 when it succeeded, 1 when "
                              "it failed."),
    timeout: float = typer.Option(0, "--timeout", help="With --wait: give up after this many seconds (exit 3); "
                                  "0: no bound."),
    poll: float = typer.Option(10, "--poll", help="With --wait: seconds between reads."),
    api_url: str = typer.Option(None, "--api-url", help="Airflow's API server, to count the launch's tries that "
                                "never reached the provider (default: $AIRFLOW_API_URL; credentials as `mtc run`)."),
    output: Output = OUTPUT_OPTION,
    options: ClusterOptions = None,
) -> None:
    """A run's attempts (one JobSet each; kept in the run's record after the teardown deleted them), their state,
    and the newest finalized checkpoint step; with Airflow's API, its tries beside them."""
    from mtc_provider.core.attempt.run_summary import ENDED_STATES

    hook = reader_hook(options)
    deadline = time.monotonic() + timeout if timeout > 0 else None
    with WaitProgress() as progress:
        while True:
            try:
                summary = run_status(options, run_name, hook)
            except _api_errors() as exc:
                _err(str(exc))
            if not summary["attempts"] and not summary["recorded"]:
                where = ", ".join(options.bases()) or "no --base given"
                _err(f"no JobSet of run {run_name!r} in namespace {options.namespace!r}, and no record of it "
                     f"({where}; a run's record is <base_output_directory>/<run_name>/mtc-attempts.json: pass "
                     "--base)")
            if not wait or summary["state"] in ENDED_STATES:
                break
            progress.update(_status_line(summary))
            if deadline is not None and time.monotonic() >= deadline:
                timed_out(f"run {run_name} still {summary['state']} after {timeout:g} s (--timeout)")
            time.sleep(poll)
    summary["tries"] = airflow_tries(summary, api_url)
    if output is not Output.text:
        emit(output, summary)
    else:
        _print_status(summary)
    if wait and summary["state"] != "succeeded":
        raise typer.Exit(ERROR)


def airflow_tries(summary: dict[str, Any], api_url: str | None) -> dict[str, Any] | None:
    """Airflow's tries of the run's launch task beside its attempts (core.attempt.tries), when Airflow's API is given and
    the run's record names its DAG run; None otherwise (a warning when the API did not answer)."""
    from mtc_provider.core.attempt.tries import tries_line, unreached_tries

    url, dag_run = api_url or env("AIRFLOW_API_URL", "AIRFLOW_URL"), summary.get("dag_run") or {}
    if not url or not dag_run.get("dag_id"):
        return None
    api = AirflowApi(url, env("AIRFLOW_CLI_TOKEN", "AIRFLOW_TOKEN"), env("AIRFLOW_USERNAME"), env("AIRFLOW_PASSWORD"))
    try:
        tries = api.tries(dag_run["dag_id"], dag_run["run_id"], dag_run.get("task_id") or "train")
    except AirflowApiError as exc:
        err_console().print(f"warning: Airflow's tries not counted: {escape(str(exc))}")
        return None
    unreached = unreached_tries(tries, summary["attempts"])
    return {"total": len(tries), "unreached": unreached,
            "line": tries_line(len(tries), len(summary["attempts"]), unreached)}


def _status_line(summary: dict[str, Any]) -> str:
    """One line for the wait's progress: the run's state, attempt and newest finalized step."""
    step = summary["newest_step"]
    target = f"/{summary['target_step']}" if summary.get("target_step") else ""
    attempt = f", attempt {summary['attempts'][-1]['attempt']}" if summary["attempts"] else ""
    return (f"run {summary['run_name']} {summary['state'] or 'unrecorded'}{attempt}, step "
            f"{step if step is not None else '-'}{target}")


def _print_status(summary: dict[str, Any]) -> None:
    from mtc_provider.core.measure.progress_report import format_duration

    def took(a: dict[str, Any]) -> str:
        return format_duration(a["end"] - a["start"]) if a.get("start") and a.get("end") else "-"

    console = _out()
    state = f": {summary['state']}" if summary["state"] else ""
    console.print(f"[bold]Run {escape(summary['run_name'])}[/bold] in namespace {escape(summary['namespace'])}{state}")
    print_table(("attempt", "JobSet", "state", "restarts", "outcome", "took", "reason"),
                ((str(a["attempt"]), a["name"] or "-", a["phase"], str(a["restarts"]), a.get("outcome") or "-",
                  took(a), a["reason"] or "-") for a in summary["attempts"]), console)
    step = summary["newest_step"]
    target = f" of {summary['target_step']}" if summary.get("target_step") else ""
    console.print(f"newest finalized step: {step if step is not None else 'none yet'}{target} "
                  f"({escape(summary['checkpoint_dir'] or 'checkpoint directory unknown')})")
    if summary.get("tries"):
        console.print(escape(summary["tries"]["line"]))
    if any((summary.get("interruptions") or {}).values()):  # nothing survived yet: no line
        from mtc_provider.core.attempt.interruptions import summary as interruption_summary

        console.print(interruption_summary(summary["interruptions"]))


def list_runs(output: Output = OUTPUT_OPTION, options: ClusterOptions = None) -> None:
    """Every run (like `xpk workload list`): state, newest step of the target, ETA, attempts, age. From the runs'
    records under --base (kept after their teardown) and the JobSets in the cluster."""
    from mtc_provider.core.basics import labels as L
    from mtc_provider.core.attempt.attempts import checkpoint_dir_of
    from mtc_provider.core.attempt.run_summary import ENDED_STATES, summary, summary_cells
    from mtc_provider.core.attempt.status import evaluate_jobset

    hook = reader_hook(options)
    records: dict[str, dict[str, Any]] = {}
    live: dict[str, list[str]] = {}
    try:
        for base in options.bases():
            for record in _records_at(options, base).runs(base):
                records[record.get("checkpoint_dir") or record.get("run_name")] = typed_record(record)
        jobsets: list[dict[str, Any]] = []
        if hook is not None:
            try:
                jobsets = list(hook.api.list(options.namespace, L.selector({L.MANAGED_BY: L.MANAGED_BY_VALUE})))
            except _api_errors() as exc:
                if not options.bases():
                    raise
                # As `status`: the records answer without the cluster (a local cluster whose supervisor left once
                # idle after its run, between the check that it runs and this read; a cluster that is down).
                err_console().print(
                    f"warning: the cluster did not answer ({escape(str(exc))}): showing the runs' records only")
        for obj in jobsets:
            where = checkpoint_dir_of(obj)
            run_name = (obj["metadata"].get("labels") or {}).get(L.RUN_NAME, "")
            if evaluate_jobset(obj).live:
                live.setdefault(where or run_name, []).append(obj["metadata"]["name"])
            if where and where not in records:
                found = _records_at(options, where).read(where)
                records[where] = typed_record(found) if found else {"run_name": run_name, "namespace": options.namespace,
                                           "checkpoint_dir": where, "state": "unrecorded", "attempts": []}
        now = time.time()
        rows = []
        for where, record in sorted(records.items(), key=lambda item: str(item[1].get("run_name"))):
            ended = record.get("state") in ENDED_STATES
            commits = [] if ended or not record.get("checkpoint_dir") else _commits(options, record["checkpoint_dir"])
            rows.append(summary(record, now, commits, live.get(where, [])))
    except _api_errors() as exc:
        _err(str(exc))
    if output is not Output.text:
        return emit(output, rows)
    print_table(("RUN", "STATE", "STEP", "ETA", "ATTEMPTS", "AGE"), (summary_cells(row) for row in rows))


def _attempt_jobset(options: ClusterOptions, hook: Any, run_name: str, attempt: int | None) -> tuple[str, int]:
    """(JobSet name, try number) of the run's attempt (the newest when None), from the record or the cluster."""
    summary = run_status(options, run_name, hook)
    attempts = summary["attempts"]
    if not attempts:
        _err(f"no attempt of run {run_name!r} in namespace {options.namespace!r} (no JobSet, no record)")
    chosen = attempts[-1] if attempt is None else next((a for a in attempts if a["attempt"] == attempt), None)
    if chosen is None:
        _err(f"run {run_name!r} has no attempt {attempt} (attempts: "
             f"{', '.join(str(a['attempt']) for a in attempts)})", USAGE_ERROR)
    if not chosen["in_cluster"]:
        _err(f"attempt {chosen['attempt']} of run {run_name!r} (JobSet {chosen['name']}) is no longer in the cluster: "
             "its pods, and their logs, went with it (keep_failed_attempts on the launch and teardown operators "
             "keeps failed attempts for debugging)")
    return chosen["name"], chosen["attempt"]


def logs(
    run_name: str = typer.Argument(..., help="The run name (checkpointing.run_name)."),
    attempt: int = typer.Option(None, "--attempt", help="The attempt (try number); default: the newest."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the attempt ends."),
    tail: int = typer.Option(None, "--tail", help="Only the last N lines (default: the whole log, up to 10 MB)."),
    poll: float = typer.Option(2.0, "--poll", help="With --follow: seconds between reads."),
    options: ClusterOptions = None,
) -> None:
    """The leader pod's log of an attempt (job index 0, completion index 0), like `kubectl logs` on that pod."""
    from mtc_provider.adapters.pod_logs import LeaderLogFollower
    from mtc_provider.adapters.protocols import NotFound
    from mtc_provider.core.attempt.status import evaluate_jobset

    if tail is not None and tail < 1:
        _err(str(SpecError("--tail", tail, "a number of lines >= 1")), USAGE_ERROR)
    hook = reader_hook(options) if options.local_home else guarded_hook(options)
    if hook is None:
        _err(f"the local cluster of {options.local_home} is not running, so no pod of run {run_name!r} is either: "
             "their logs went with them (`mtc status` reads the run's record; `mtc local up --home "
             f"{options.local_home}` starts the cluster)")
    try:
        name, number = _attempt_jobset(options, hook, run_name, attempt)
        try:
            reader = hook.pod_logs()
        except NotImplementedError as exc:
            _err(str(exc))
        leaders = [p for p in reader.pods(options.namespace, name) if p.leader]
        if not leaders:
            _err(f"attempt {number} of run {run_name!r} (JobSet {name}) has no leader pod (yet)")
        if not follow:
            sys.stdout.write(_ensure_newline(reader.read(options.namespace, leaders[0].name,
                                                         tail_lines=tail or 1_000_000, limit_bytes=10 * 2**20)))
            return
        follower = LeaderLogFollower(reader, options.namespace, name, max_lines=tail or 100_000)
        while True:
            for line in follower.poll():
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
            try:
                if not evaluate_jobset(hook.api.get(options.namespace, name)).live:
                    for line in follower.poll():  # what it wrote before it ended
                        sys.stdout.write(line + "\n")
                    return
            except NotFound:
                return
            time.sleep(poll)
    except _api_errors() as exc:
        _err(str(exc))


def _ensure_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def delete(
    run_name: str = typer.Argument(..., help="The run name (checkpointing.run_name) whose JobSets to delete."),
    attempt: int = typer.Option(None, "--attempt", help="Only this attempt's JobSet (try number)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Delete live (training) JobSets without asking."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the JobSets (and their pods) are gone."),
    timeout: float = typer.Option(600, "--timeout", help="With --wait: give up after this many seconds (exit 3)."),
    options: ClusterOptions = None,
) -> None:
    """Delete a run's JobSets (like `xpk workload delete`): its slices are freed, its checkpoints and its record
    stay, so a new launch with the same run name resumes. Who asked (user, host, pid) and why (user-request) go
    with each delete request to the cluster's audit. A live JobSet ends its launch task: asked first, unless --yes."""
    from mtc_provider.adapters.kubernetes import delete_headers
    from mtc_provider.adapters.protocols import NotFound
    from mtc_provider.core.basics import vocabulary as V
    from mtc_provider.core.attempt.attempts import attempts as attempts_of, run_selector
    from mtc_provider.core.attempt.status import evaluate_jobset

    hook = guarded_hook(options)
    namespace = options.namespace
    try:
        found = hook.api.list(namespace, run_selector(run_name))
        chosen = [o for o in found if attempt is None or _try_number(o) == attempt]
        if not chosen:
            which = f"attempt {attempt} of run" if attempt is not None else "run"
            _err(f"no JobSet of {which} {run_name!r} in namespace {namespace!r}: nothing to delete")
        live = [o["metadata"]["name"] for o in chosen if evaluate_jobset(o).live]
        if live and not yes and not typer.confirm(
                f"{', '.join(live)} {'is' if len(live) == 1 else 'are'} training: deleting ends the run's launch "
                "task (its checkpoints stay). Delete?", default=False, err=True):
            _err("not deleted", ERROR)
        who = delete_headers(V.DELETE_USER_REQUEST)[V.DELETE_CALLER_HEADER]
        names = [a.name for a in attempts_of(chosen)]
        for name in names:
            _out().print(f"deleting JobSet {escape(namespace)}/{escape(name)} (checkpoints are kept): asked by "
                         f"{escape(who)}")
            hook.api.delete(namespace, name, reason=V.DELETE_USER_REQUEST)
        if wait:
            deadline = time.monotonic() + timeout
            with WaitProgress() as progress:
                for name in names:
                    while True:
                        try:
                            hook.api.get(namespace, name)
                        except NotFound:
                            break
                        if time.monotonic() >= deadline:
                            timed_out(f"JobSet {namespace}/{name} still terminating after {timeout:g} s (--timeout; "
                                      "foreground deletion waits for its pods)")
                        progress.update(f"JobSet {namespace}/{name} terminating")
                        time.sleep(1.0)
            _out().print(f"deleted {len(names)} JobSet(s) of run {escape(run_name)}")
    except _api_errors() as exc:
        _err(str(exc))


def _try_number(jobset: dict[str, Any]) -> int | None:
    from mtc_provider.core.attempt.launch import attempt_of

    return attempt_of(jobset) or None


def register(app: typer.Typer) -> None:
    """Add the commands to the `mtc` app (cli.app)."""
    app.command("list")(cluster_options()(list_runs))
    app.command("status")(cluster_options()(status))
    app.command("logs")(cluster_options(records=True)(logs))
    app.command("delete")(cluster_options(records=False)(delete))
