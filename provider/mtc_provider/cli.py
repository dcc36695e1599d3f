"""`mtc`: size the ramdisk, plan a run, render its manifests. No cluster or network access.

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


def render_manifests(manifests: Any) -> str:
    return yaml.safe_dump_all(list(manifests), sort_keys=False, default_flow_style=False, width=1_000_000)


if __name__ == "__main__":  # pragma: no cover
    app()
