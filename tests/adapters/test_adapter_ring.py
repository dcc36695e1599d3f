"""The adapters (ring 2, design.md "The rings") import no Airflow glue: no operator, sensor, trigger, hook, plugin or
CLI module, at module level or inside a function (issue 36: `adapters/airflow_run.py` imported the launch operator's
module for its XCom keys; they live in `adapters/attempt_journal.py` now).

Known exception, named so that a new one fails: the attempt journal and the run reader build the provider's extra
links (`links/`), whose URL rules live with the link classes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mtc_provider.adapters

ADAPTERS = Path(mtc_provider.adapters.__file__).parent
GLUE = ("operators", "sensors", "triggers", "hooks", "plugins", "cli", "links")
ALLOWED = {("attempt_journal", "mtc_provider.links.jobset"), ("airflow_run", "mtc_provider.links.goodput"),
           ("airflow_run", "mtc_provider.links.jobset")}


def glue_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                 [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        found.update(name for name in names if name.split(".")[:1] == ["mtc_provider"]
                     and name.split(".")[1:2] and name.split(".")[1] in GLUE)
    return found


def test_no_adapter_imports_the_airflow_glue():
    found = {(path.stem, name) for path in ADAPTERS.glob("*.py") for name in glue_imports(path)}
    assert found - ALLOWED == set()


def test_the_check_sees_a_function_level_import(tmp_path):
    module = tmp_path / "x.py"
    module.write_text("def f():\n    from mtc_provider.operators.jobset import XCOM_KEY\n")
    assert glue_imports(module) == {"mtc_provider.operators.jobset"}
