"""The provider's `cli` section for Airflow (get_provider_info.py): the commands it adds to `airflow`, none.

Airflow 3.3's CLI parser (airflow/cli/cli_parser.py) loads the commands of a provider that registers executors from
the functions its `cli` section names; a provider with executors and no `cli` section gets the older compat path,
which imports each configured executor and, first, logs a 6-line warning on every `airflow` command, to standard
output, where it breaks machine-readable output (`airflow plugins -o json`). PreloadLocalExecutor adds no command
of its own (LocalExecutor has none), so the section names this function, which returns none. It must stay cheap to
import: Airflow imports it on every `airflow` command.
"""

from __future__ import annotations

from typing import Any


def get_cli_commands() -> list[Any]:
    """The `airflow` subcommands of this provider's executors: none (PreloadLocalExecutor is a LocalExecutor)."""
    return []
