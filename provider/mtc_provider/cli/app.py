"""`mtc`: size the ramdisk, plan a run, render its manifests, advise checkpoint periods (no cluster or network
access); `mtc list`, `status`, `logs` and `delete` follow a run's life (cli/runs.py); `mtc unlock` frees a run name
whose lock outlived its run.

Bad input (a SpecError, invalid YAML, a missing file) goes to stderr with exit code 2, naming the field,
the bad value and what is allowed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from mtc_provider import __version__
from mtc_provider.cli.console import OUTPUT_OPTION, Output, emit as _emit, guarded as _guarded, load_data
from mtc_provider.cli.console import out as _out
from mtc_provider.cli.cluster_options import ClusterOptions, cluster_options, guarded_hook
from mtc_provider.cli.runs import register as register_run_commands
from mtc_provider.cli.submit import run as submit_run
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.plan import build_plan
from mtc_provider.core.definition.shape.sizing import (DEFAULT_BUFFER, DEFAULT_BYTES_PER_PARAMETER, check_fits_host,
                                                 ramdisk_size)
from mtc_provider.core.definition.description.spec import RunConfig
from mtc_provider.core.definition.shape.tpu import HOST_MEMORY_GIB, SliceSpec

app = typer.Typer(name="mtc", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
register_run_commands(app)  # mtc list, status, logs, delete (cli/runs.py)
app.command(name="run")(submit_run)  # mtc run (cli/submit.py)


def _version(value: bool) -> None:
    if value:
        _out().print(f"mtc {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the provider's version and exit."),
) -> None:
    """Multi-Tier Checkpointing for TPU training on GKE, from a terminal.

    \b
    Plan, with no cluster or network access:
      size     the ramdisk per host, step by step as the guide computes it
      plan     validate a run description; what will be checked, created and bound
      render   the manifests (CheckpointConfiguration, JobSet) as YAML for kubectl
      advise   the checkpoint periods that maximise expected goodput
    Start, through Airflow's REST API:
      run      trigger the training DAG with a run description
    Follow and act on runs, in a cluster or the local target (--local-home):
      list     every run: state, step, ETA, attempts, age
      status   a run's attempts, their outcome, and the newest finalized step
      logs     the leader pod's log of an attempt
      delete   a run's JobSets (never its checkpoints or record)
      unlock   free a run name whose lock outlived its run
    The local target:
      local    up / down: its Kubernetes API server, runner and GCS

    Exit codes: 0 done, 1 failed, 2 bad input (nothing sent), 3 --wait timed out.
    """


def load_config(path: Path) -> RunConfig:
    """Read and validate a run description (`-` reads standard input); every failure becomes a SpecError."""
    from mtc_provider.core.definition.description.run import parse_run  # the one parse, the DAG's plan task's too
    from mtc_provider.target import default_local_home

    return parse_run(load_data(path), default_local_home())


@app.command()
def size(
    params: str = typer.Option(..., "--params", help="Number of model parameters, e.g. 70e9."),
    hosts: int = typer.Option(None, "--hosts", help="Hosts in one slice (the checkpoint is sharded across them)."),
    tpu_type: str = typer.Option(None, "--tpu-type", help="v4, v5e, v5p or v6e: with --topology, derives --hosts."),
    topology: str = typer.Option(None, "--topology", help="Chips per slice, e.g. 4x8 or 2x2x2."),
    machine_type: str = typer.Option("", "--machine-type", help="The node pool's machine type (default per TPU type)."),
    bytes_per_param: str = typer.Option(str(DEFAULT_BYTES_PER_PARAMETER), "--bytes-per-param",
                                        help="Bytes per parameter (weights + optimizer)."),
    buffer: str = typer.Option(str(DEFAULT_BUFFER), "--buffer", help="Safety buffer, 0.10 to 0.15."),
    allow_any_buffer: bool = typer.Option(False, "--allow-any-buffer",
                                          help="Accept a buffer outside the guide's 10-15% (0 to 1)."),
    output: Output = OUTPUT_OPTION,
) -> None:
    """Ramdisk size per host, computed step by step as the guide does; with a machine type (given, or the TPU
    type's default), refused when the host's memory cannot hold it."""
    slices = _guarded(lambda: _slice_for_size(hosts, tpu_type, topology, machine_type))
    hosts_per_slice = slices.hosts_per_slice if slices else hosts
    result = _guarded(lambda: ramdisk_size(params, hosts_per_slice, bytes_per_param, buffer,
                                           allow_any_buffer=allow_any_buffer))
    fit_type = slices.machine_type if slices else machine_type
    warning = _guarded(lambda: _fits(result, fit_type)) if fit_type else None
    if warning:
        Console(file=sys.stderr, soft_wrap=True, highlight=False).print(f"warning: {escape(warning)}")
    if output is not Output.text:
        data: dict[str, Any] = {}
        if slices:
            data["slices"] = {"tpu_type": slices.tpu_type, "topology": slices.topology,
                              "machine_type": slices.machine_type, "chips_per_host": slices.chips_per_host,
                              "hosts_per_slice": slices.hosts_per_slice}
        data |= {key: getattr(result, key) for key in ("parameters", "bytes_per_parameter", "hosts_per_slice",
                                                         "buffer", "checkpoint_bytes", "shard_bytes", "doubled_bytes",
                                                         "total_bytes")}
        data["in_memory_volume_size"] = result.quantity
        return _emit(output, data)
    console = _out()
    if slices:
        console.print(escape(f"{slices.tpu_type} {slices.topology} on {slices.machine_type}: "
                             f"{slices.chips_per_slice} chips / {slices.chips_per_host} per host = "
                             f"{slices.hosts_per_slice} hosts per slice"))
    for line in result.walkthrough():
        console.print(escape(line))


def _fits(result: Any, machine_type: str) -> str | None:
    if machine_type not in HOST_MEMORY_GIB:
        raise SpecError("--machine-type", machine_type, f"one of {', '.join(HOST_MEMORY_GIB)}")
    return check_fits_host(result, machine_type, HOST_MEMORY_GIB[machine_type] * 2**30)


def _slice_for_size(hosts: int | None, tpu_type: str | None, topology: str | None, machine_type: str) -> SliceSpec | None:
    """The slice when --tpu-type and --topology are given (the host count follows); None when --hosts is."""
    if tpu_type is None and topology is None:
        if hosts is None:
            raise SpecError("--hosts", None, "a host count, or --tpu-type with --topology to derive it")
        return None
    if hosts is not None:
        raise SpecError("--hosts", hosts, "left out when --tpu-type and --topology are given (they derive it)")
    if not tpu_type or not topology:
        raise SpecError("--tpu-type" if not tpu_type else "--topology", tpu_type or topology,
                        "both --tpu-type and --topology (e.g. --tpu-type v5p --topology 2x2x2)")
    # num_slices does not change the per-host size; 2 is the smallest multi-slice run.
    return SliceSpec(tpu_type, topology, 2, machine_type)


@app.command()
def plan(
    config: Path = typer.Argument(..., help="Run description (YAML); - reads it from standard input."),
    project_number: str = typer.Option(None, "--project-number", help="GCP project number for the IAM principals."),
    output: Output = OUTPUT_OPTION,
) -> None:
    """Validate a run description and show what will be checked, created and bound."""
    result = _guarded(lambda: build_plan(load_config(config), project_number))
    if output is not Output.text:
        return _emit(output, plan_document(result))
    console = _out()
    console.print(f"[bold]Plan for target {result.target}[/bold]")
    for section, lines in result.lines().items():
        console.print(f"\n[bold]{escape(section.capitalize())}[/bold]")
        for line in lines:
            console.print(f"  {escape(line)}")


def plan_document(result: Any) -> dict[str, Any]:
    """The plan as data: what is checked, created and bound, the ramdisk size and the manifests."""
    return {
        "target": result.target,
        "checks": [{"name": s.name, "description": result._describe(s)} for s in result.checks],
        "creates": [{"name": s.name, "description": s.description} for s in result.creates],
        "binds": [{"resource": b.resource, "role": b.role, "member": b.member} for b in result.binds],
        "ramdisk": {"in_memory_volume_size": result.ramdisk.quantity, "total_bytes": result.ramdisk.total_bytes,
                    "hosts_per_slice": result.ramdisk.hosts_per_slice, "walkthrough": result.ramdisk.walkthrough()},
        "manifests": list(result.manifests),
        "not_applicable_locally": list(result.not_applicable_locally),
    }


@app.command()
def render(config: Path = typer.Argument(..., help="Run description (YAML); - reads it from standard input.")) -> None:
    """Print the manifests as one YAML stream, ready for `kubectl apply -f -`."""
    result = _guarded(lambda: build_plan(load_config(config)))
    sys.stdout.write(render_manifests(result.manifests))


@app.command()
def advise(
    events: list[Path] = typer.Option(None, "--events", help="Event files or directories of earlier runs of one "
                                      "run_name (<base>/<run_name>/events); repeatable."),
    step_s: str = typer.Option(None, "--step-s", help="Seconds per training step (overrides the measured one)."),
    save_local_s: str = typer.Option(None, "--save-local-s", help="Seconds a local save blocks training."),
    save_persistent_s: str = typer.Option(None, "--save-persistent-s",
                                          help="Seconds a persistent save step blocks training."),
    restore_local_s: str = typer.Option(None, "--restore-local-s", help="Seconds to restore from the local tier."),
    restore_persistent_s: str = typer.Option(None, "--restore-persistent-s",
                                             help="Seconds to restore from the persistent tier."),
    restart_s: str = typer.Option(None, "--restart-s", help="Seconds from a failure to training again, restore "
                                  "excluded (resubmission, start-up)."),
    local_write_s: str = typer.Option(None, "--local-write-s", help="Seconds a whole (async) local save takes."),
    startup_s: str = typer.Option(None, "--startup-s", help="Seconds from submission to the first step, once."),
    steps: int = typer.Option(None, "--steps", help="Steps of the run (bounds P; default: measured, else none)."),
    host_mtbf_s: str = typer.Option(None, "--host-mtbf-s", help="Mean seconds between losses of ONE host."),
    hosts: int = typer.Option(1, "--hosts", help="Hosts of the run (scales --host-mtbf-s)."),
    slice_mtbf_s: str = typer.Option(None, "--slice-mtbf-s", help="Mean seconds between slice or cluster losses."),
    preemption_mtbf_s: str = typer.Option(None, "--preemption-mtbf-s", help="Mean seconds between preemptions."),
    current: str = typer.Option(None, "--current", help="The periods in use, L,P (default: read from --events)."),
    output: Output = OUTPUT_OPTION,
) -> None:
    """Checkpoint periods (L, P) maximising expected goodput, from measurements and/or figures given by hand."""
    from mtc_provider.core.view.advisor import FailureRates, advice_report, measure_events

    def build() -> dict[str, Any]:
        measured = None
        if events:
            from mtc_provider.adapters.workload_events import read_events

            found = [e for path in events for e in read_events(path)]
            if not found:
                raise SpecError("--events", [str(p) for p in events], "files or directories holding workload events")
            measured = measure_events(found)
        given_mtbf = (host_mtbf_s, slice_mtbf_s, preemption_mtbf_s)
        rates = None if all(v is None for v in given_mtbf) else FailureRates.from_mtbf(*given_mtbf, hosts=hosts)
        periods = None
        if current is not None:
            try:
                periods = tuple(int(part) for part in current.split(","))
            except ValueError:
                periods = ()
            if len(periods) != 2:
                raise SpecError("--current", current, "two integers L,P, e.g. 4,20")
        given = {"step_s": step_s, "save_local_s": save_local_s, "save_persistent_s": save_persistent_s,
                 "restore_local_s": restore_local_s, "restore_persistent_s": restore_persistent_s,
                 "restart_s": restart_s, "local_write_s": local_write_s}
        return advice_report(measured, given, rates, steps, startup_s, periods)

    result = _guarded(build)
    if output is not Output.text:
        return _emit(output, result)
    console = _out()
    for line in result["lines"]:
        console.print(escape(line))


@app.command()
@cluster_options(records=False)
def unlock(
    run_name: str = typer.Argument("", help="The run name (checkpointing.run_name) whose run lock to delete."),
    force: bool = typer.Option(False, "--force", help="Delete the lock even while a JobSet of the run is live."),
    checkpoint_dir: str = typer.Option("", "--checkpoint-dir", help=(
        "Instead: free this checkpoint directory's claim (held by a launch in any namespace or Airflow deployment), "
        "so the next launch writing it may start. Said and logged with its holder.")),
    options: ClusterOptions = None,
) -> None:
    """Delete a run's lock (ConfigMap mtc-run-RUN) that outlived its run, after saying who held it.

    A launch takes a lock over by itself when Airflow shows its owner ended or its DAG run deleted; this is for
    what remains (a lock from an older version, an owner Airflow cannot answer about). Refused while a JobSet
    of the run is live (two JobSets would write the same checkpoints), unless --force.
    """
    if bool(run_name) == bool(checkpoint_dir):
        Console(file=sys.stderr, soft_wrap=True).print("error: give a run name or --checkpoint-dir (one of them)")
        raise typer.Exit(2)
    hook = guarded_hook(options)
    namespace = options.namespace
    if checkpoint_dir:
        return _unclaim(hook, checkpoint_dir)
    from mtc_provider.adapters.protocols import ApiError
    from mtc_provider.adapters.run_lock import HOLDER, OWNER, unlock as delete_lock
    from mtc_provider.core.basics import labels as L
    from mtc_provider.core.attempt.ownership import describe_owner
    from mtc_provider.core.attempt.status import evaluate_jobset

    err = Console(file=sys.stderr, soft_wrap=True, highlight=False)
    name = L.lock_name(run_name)
    try:
        api = hook.api
        selector = L.selector({L.RUN_NAME: L.label_value(run_name), L.MANAGED_BY: L.MANAGED_BY_VALUE})
        live = [o["metadata"]["name"] for o in api.list(namespace, selector) if evaluate_jobset(o).live]
        if live and not force:
            err.print(f"error: JobSet(s) {escape(', '.join(live))} of run {escape(run_name)!r} are live in namespace "
                      f"{escape(namespace)!r}: their launch still holds the lock. Delete them first (kubectl delete "
                      f"jobset -n {escape(namespace)} {escape(live[0])}), or pass --force")
            raise typer.Exit(1)
        data = delete_lock(api, namespace, run_name)
    except (ApiError, OSError) as exc:
        err.print(f"error: {escape(str(exc))}")
        raise typer.Exit(1) from None
    if data is None:
        err.print(f"error: run {escape(run_name)!r} has no lock {escape(namespace)}/{escape(name)}: nothing to do")
        raise typer.Exit(1)
    owner, holder = data[OWNER], data[HOLDER]
    held_by = describe_owner(owner) if owner else (f"DAG {holder.get(L.DAG_ID)}, run {holder.get(L.RUN_ID)}, "
                                                   f"task {holder.get(L.TASK_ID)}")
    _out().print(f"deleted run lock {escape(namespace)}/{escape(name)} (held by {escape(held_by)}); run name "
                 f"{escape(run_name)!r} is free")


def _unclaim(hook: Any, checkpoint_dir: str) -> None:
    """`mtc unlock --checkpoint-dir DIR`: the user's explicit take-over of a directory from its holder, logged."""
    import logging

    from mtc_provider.adapters.protocols import ApiError
    from mtc_provider.adapters.run_lock import HOLDER, NAMESPACE, OWNER, claim_name, lock_namespace, unclaim
    from mtc_provider.core.attempt.ownership import describe_owner
    from mtc_provider.core.basics import labels as L

    err = Console(file=sys.stderr, soft_wrap=True, highlight=False)
    where = f"{lock_namespace()}/{claim_name(checkpoint_dir)}"
    try:
        data = unclaim(hook.api, checkpoint_dir)
    except (ApiError, OSError) as exc:
        err.print(f"error: {escape(str(exc))}")
        raise typer.Exit(1) from None
    if data is None:
        err.print(f"error: checkpoint directory {escape(checkpoint_dir)} has no claim {escape(where)}: nothing to do")
        raise typer.Exit(1)
    holder = data[HOLDER]
    held_by = (describe_owner(data[OWNER]) if data[OWNER] else f"DAG {holder.get(L.DAG_ID)}") + \
        f" in namespace {holder.get(NAMESPACE)}, Airflow deployment {data.get('deployment') or 'unknown'}"
    message = (f"deleted checkpoint claim {where} on {checkpoint_dir} (held by {held_by}); the next launch writing it "
               "may start")
    logging.getLogger("mtc_provider.cli").warning("%s", message)
    _out().print(escape(message))


local_app = typer.Typer(help="The local target's cluster and GCS: start them in the background and stop them, as `kind` would.",
                        no_args_is_help=True)
app.add_typer(local_app, name="local")
HOME_OPTION = typer.Option(None, "--home", help="The local target's home (default: $MTC_LOCAL_HOME or ~/.mtc/local).")


def _local_home(home: Path | None) -> Path:
    from mtc_provider.target import default_local_home

    return Path(home or default_local_home()).expanduser()


def _local_cluster(*args: str, program: str = "mtc_local.cluster") -> None:
    """`python -m mtc_local.cluster ...` (or .gcs), as a process: the provider never imports the local
    target."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", program, *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        Console(file=sys.stderr, soft_wrap=True, highlight=False).print(escape(done.stderr.strip()))
        raise typer.Exit(1)


@local_app.command("up")
def local_up(home: Path = HOME_OPTION) -> None:
    """Start the local cluster (its Kubernetes API server and JobSet runner); print its kubeconfig."""
    where = _local_home(home)
    _local_cluster("up", "--home", str(where), "--stay")  # stays up until `mtc local down`
    _out().print("local GCS endpoint (the GCS JSON API over the home's bucket folders):")
    _local_cluster("up", "--home", str(where.resolve()), program="mtc_local.gcs")  # until `down`
    _out().print(f"try: kubectl --kubeconfig {where.resolve() / 'kubeconfig'} get jobsets,pods")


@local_app.command("down")
def local_down(home: Path = HOME_OPTION) -> None:
    """Stop the local cluster and the local GCS (by the PIDs they recorded); pods stop with them, files stay."""
    _local_cluster("down", "--home", str(_local_home(home)))
    _local_cluster("down", "--home", str(_local_home(home).resolve()), program="mtc_local.gcs")


def render_manifests(manifests: Any) -> str:
    return yaml.safe_dump_all(list(manifests), sort_keys=False, default_flow_style=False, width=1_000_000)

