"""The CLI package has no circle: each module imports only the modules below it (cli/__init__.py's list).

Issue 36 found `cli.py` <-> `cli_run.py` <-> `cli_runs.py`, held together by a bottom-of-file import and shared
private helpers; this reads every import (module level and inside functions) from the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mtc_provider.cli

PACKAGE = Path(mtc_provider.cli.__file__).parent
# Each module, and the CLI modules it may import.
BELOW = {
    "console": set(),
    "airflow_api": set(),
    "submit": {"console", "airflow_api"},
    "cluster_options": {"console"},
    "runs": {"console", "airflow_api", "cluster_options"},
    "app": {"console", "airflow_api", "cluster_options", "runs", "submit"},
    "__main__": {"app"},
    "__init__": set(),
}


def cli_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                 [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            if name.startswith("mtc_provider.cli."):
                found.add(name.split(".")[2])
            elif name == "mtc_provider.cli" and isinstance(node, ast.ImportFrom):
                found.update(alias.name for alias in node.names)
    return found


def test_every_cli_module_is_in_the_layer_list():
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(BELOW)


def test_each_cli_module_imports_only_modules_below_it():
    wrong = {p.stem: sorted(cli_imports(p) - BELOW[p.stem]) for p in PACKAGE.glob("*.py")}
    assert not {name: bad for name, bad in wrong.items() if bad}, "a CLI module imports one above it (a circle)"
