"""`mtc`: size the ramdisk, plan a run, render its manifests, advise checkpoint periods. No cluster or
network access.

Bad input (a SpecError, invalid YAML, a missing file) goes to stderr with exit code 2, naming the field,
the bad value and what is allowed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from mtc_provider.core.errors import SpecError
from mtc_provider.core.plan import build_plan
from mtc_provider.core.sizing import DEFAULT_BUFFER, DEFAULT_BYTES_PER_PARAMETER, check_fits_host, ramdisk_size
from mtc_provider.core.spec import RunConfig
from mtc_provider.core.tpu import HOST_MEMORY_GIB

app = typer.Typer(
    name="mtc",
    help="Multi-Tier Checkpointing for TPU training on GKE: size, plan and render a run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
USAGE_ERROR = 2
T = TypeVar("T")


def _out() -> Console:
    # soft_wrap: long IAM principals and walk-through lines stay on one line, whatever the terminal width.
    return Console(file=sys.stdout, soft_wrap=True, highlight=False)


def _fail(message: str) -> None:
    Console(file=sys.stderr, soft_wrap=True, highlight=False).print(f"error: {escape(message)}")
    raise typer.Exit(USAGE_ERROR)


def _guarded(action: Callable[[], T]) -> T:
    try:
        return action()
    except SpecError as exc:
        _fail(str(exc))
    raise AssertionError("unreachable")


def load_config(path: Path) -> RunConfig:
    """Read and validate a run description; every failure becomes a SpecError naming what is wrong."""
    if not path.is_file():
        raise SpecError("config", str(path), "the path of an existing YAML run description")
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        position = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise SpecError("config", str(path), f"valid YAML (parse error{position}: {getattr(exc, 'problem', exc)})") from exc
    return RunConfig.from_dict(data)


@app.command()
def size(
    params: str = typer.Option(..., "--params", help="Number of model parameters, e.g. 70e9."),
    hosts: int = typer.Option(..., "--hosts", help="Hosts in one slice (the checkpoint is sharded across them)."),
    bytes_per_param: str = typer.Option(
        str(DEFAULT_BYTES_PER_PARAMETER), "--bytes-per-param", help="Bytes per parameter (weights + optimizer)."
    ),
    buffer: str = typer.Option(str(DEFAULT_BUFFER), "--buffer", help="Safety buffer, 0.10 to 0.15."),
    allow_any_buffer: bool = typer.Option(
        False, "--allow-any-buffer", help="Accept a buffer outside the guide's 10-15% (0 to 1)."
    ),
    machine_type: str = typer.Option(
        None, "--machine-type", help="TPU machine type: refuse a ramdisk its host memory cannot hold."
    ),
) -> None:
    """Ramdisk size per host, computed step by step as the guide does."""
    result = _guarded(lambda: ramdisk_size(params, hosts, bytes_per_param, buffer, allow_any_buffer=allow_any_buffer))
    warning = _guarded(lambda: _fits(result, machine_type)) if machine_type else None
    console = _out()
    for line in result.walkthrough():
        console.print(escape(line))
    if warning:
        Console(file=sys.stderr, soft_wrap=True, highlight=False).print(f"warning: {escape(warning)}")


def _fits(result: Any, machine_type: str) -> str | None:
    if machine_type not in HOST_MEMORY_GIB:
        raise SpecError("--machine-type", machine_type, f"one of {', '.join(HOST_MEMORY_GIB)}")
    return check_fits_host(result, machine_type, HOST_MEMORY_GIB[machine_type] * 2**30)


@app.command()
def plan(
    config: Path = typer.Argument(..., help="Run description (YAML)."),
    project_number: str = typer.Option(None, "--project-number", help="GCP project number for the IAM principals."),
) -> None:
    """Validate a run description and show what will be checked, created and bound."""
    result = _guarded(lambda: build_plan(load_config(config), project_number))
    console = _out()
    console.print(f"[bold]Plan for target {result.target}[/bold]")
    for section, lines in result.lines().items():
        console.print(f"\n[bold]{escape(section.capitalize())}[/bold]")
        for line in lines:
            console.print(f"  {escape(line)}")


@app.command()
def render(config: Path = typer.Argument(..., help="Run description (YAML).")) -> None:
    """Print the manifests as one YAML stream, ready for `kubectl apply -f -`."""
    result = _guarded(lambda: build_plan(load_config(config)))
    sys.stdout.write(render_manifests(result.manifests))


OUTPUTS = ("text", "json")


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
    output: str = typer.Option("text", "--output", help="text or json."),
) -> None:
    """Checkpoint periods (L, P) maximising expected goodput, from measurements and/or figures given by hand."""
    from mtc_provider.core.advisor import FailureRates, advice_report, measure_events

    def build() -> dict[str, Any]:
        if output not in OUTPUTS:
            raise SpecError("--output", output, ", ".join(OUTPUTS))
        measured = None
        if events:
            from mtc_provider.local.workload_events import read_events

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
    if output == "json":
        import json

        sys.stdout.write(json.dumps(result, indent=1) + "\n")
        return
    console = _out()
    for line in result["lines"]:
        console.print(escape(line))


def render_manifests(manifests: Any) -> str:
    return yaml.safe_dump_all(list(manifests), sort_keys=False, default_flow_style=False, width=1_000_000)


if __name__ == "__main__":  # pragma: no cover
    app()
