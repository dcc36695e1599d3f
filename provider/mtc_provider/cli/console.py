"""What every `mtc` command shares: its consoles, exit codes, output formats and input reading.

The bottom of the CLI package: it imports no other module of it (app -> submit, runs -> console, airflow_api).
Exit codes (docs/cli.md): 0 done, ERROR (1) failed, USAGE_ERROR (2) bad input (nothing sent), TIMED_OUT (3) a
--wait gave up at --timeout.
"""

from __future__ import annotations

import json
import sys
import time
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from mtc_provider.core.basics.errors import SpecError

ERROR = 1
USAGE_ERROR = 2
TIMED_OUT = 3
STDIN = "-"
UNBOUNDED = 1_000_000  # columns: wider than any line a command prints
T = TypeVar("T")


def _flags_without_a_type() -> None:
    """typer's rich --help (0.29) prints a flag's type beside it (`--wait <bool>`) as if the flag took a value; a
    flag takes none, and click's plain help shows none."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)  # the method the rich help asks, where typer has it
    if shown is not None:
        TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else shown(self, ctx)


_flags_without_a_type()


def out() -> Console:
    # soft_wrap: long IAM principals and walk-through lines stay on one line, whatever the terminal width.
    return Console(file=sys.stdout, soft_wrap=True, highlight=False)


def err_console() -> Console:
    return Console(file=sys.stderr, soft_wrap=True, highlight=False)


def fail(message: str, code: int = USAGE_ERROR) -> None:
    """`error: ...` on stderr and exit `code` (bad input by default)."""
    err_console().print(f"error: {escape(message)}")
    raise typer.Exit(code)


def guarded(action: Callable[[], T]) -> T:
    """Run `action`; a SpecError (bad input) exits USAGE_ERROR with its message."""
    try:
        return action()
    except SpecError as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


def timed_out(message: str) -> None:
    """--wait gave up at --timeout: the same exit code (TIMED_OUT) from every command that waits."""
    err_console().print(f"timed out: {escape(message)}")
    raise typer.Exit(TIMED_OUT)


class Output(str, Enum):
    text = "text"
    json = "json"
    yaml = "yaml"


OUTPUT_OPTION = typer.Option(Output.text, "--output", "-o", help="text (for people), json or yaml (for scripts).")


def plain(value: Any) -> Any:
    """JSON/YAML-friendly values: Decimals become ints when whole, floats otherwise; tuples become lists."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def emit(output: Output, data: Any) -> None:
    """Print machine-readable output for --output json|yaml."""
    if output is Output.json:
        sys.stdout.write(json.dumps(plain(data), indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(plain(data), sort_keys=False, default_flow_style=False, width=UNBOUNDED))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[str]], console: Console | None = None) -> None:
    """A table for people, each row on one line as kubectl prints one: rich fits a table to the terminal (80
    columns when piped) by cutting or folding cells, and a cut JobSet name can be neither read nor pasted."""
    from rich.table import Table

    table = Table(*headers, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    console = console or out()
    natural = console.measure(table, options=console.options.update_width(UNBOUNDED)).maximum
    width, console.width = console.width, natural
    console.print(table)
    console.width = width


def load_data(path: Path) -> Any:
    """Read a run description's YAML (`-` reads standard input); a missing file or bad YAML is a SpecError."""
    if str(path) == STDIN:
        text, name = sys.stdin.read(), "<stdin>"
    elif not path.is_file():
        raise SpecError("config", str(path), "the path of an existing YAML run description, or - for stdin")
    else:
        text, name = path.read_text(encoding="utf-8"), str(path)
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        position = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise SpecError("config", name, f"valid YAML (parse error{position}: {getattr(exc, 'problem', exc)})") from exc
    return data


class WaitProgress:
    """What a --wait is waiting for, on stderr (stdout stays the command's result): on a terminal a rich spinner with
    the state and the time waited, updated at each poll; elsewhere (a pipe, a CI log) one line per change."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(file=sys.stderr, soft_wrap=True, highlight=False)
        self.started = time.monotonic()
        self.last: str | None = None
        self._status: Any = None

    def __enter__(self) -> "WaitProgress":
        if self.console.is_terminal:
            self._status = self.console.status("waiting")
            self._status.start()
        return self

    def update(self, text: str) -> None:
        from mtc_provider.core.measure.progress_report import format_duration

        waited = format_duration(time.monotonic() - self.started)
        if self._status is not None:
            self._status.update(f"{escape(text)} (waited {waited})")
        elif text != self.last:
            self.console.print(f"waiting: {escape(text)} (after {waited})")
        self.last = text

    def __exit__(self, *exc: Any) -> None:
        if self._status is not None:
            self._status.stop()

