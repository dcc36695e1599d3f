"""The Airflow internals of adapters/airflow_private.py are where the installed Airflow keeps them, and nothing else
in the provider imports an Airflow internal.

Checked on apache-airflow 3.3.2 / apache-airflow-task-sdk 1.3.2 (`airflow.__version__`, `airflow.sdk.__version__`
of the pinned install). The lowest-versions job (scripts/test-lowest.sh, `apache-airflow>=3.3.0`, whose meta package
pins the matching Task SDK) runs this test on 3.3.0 too.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from mtc_provider.adapters import airflow_private

CHECKED_ON = {"apache-airflow": "3.3.2", "apache-airflow-task-sdk": "1.3.2"}
PROVIDER = Path(airflow_private.__file__).resolve().parents[1]
# Airflow's public interface is `airflow.sdk` (and the extension points: triggers, executors, plugins); these
# module prefixes are its internals.
INTERNAL = ("airflow.sdk.execution_time", "airflow.sdk._shared", "airflow._shared", "airflow.sdk.bases",
            "airflow.sdk.definitions", "airflow.sdk.configuration", "airflow.sdk.observability", "airflow.utils")


def _installed() -> str:
    import airflow
    import airflow.sdk

    return f"apache-airflow {airflow.__version__} / apache-airflow-task-sdk {airflow.sdk.__version__}"


def _has(module, name: str) -> bool:
    """`module.name`: an attribute (an annotation-only one counts: it is set at run time), or a submodule."""
    if hasattr(module, name) or name in getattr(module, "__annotations__", {}):
        return True
    try:
        importlib.import_module(f"{module.__name__}.{name}")
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("module, name", airflow_private.PRIVATE_NAMES,
                         ids=[f"{m}.{n}" for m, n in airflow_private.PRIVATE_NAMES])
def test_every_private_name_is_where_it_was(module, name):
    where = f"{module}.{name}"
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is gone on {_installed()} (checked on {CHECKED_ON}): {exc}; find where {name} moved "
                    "and update adapters/airflow_private.py")
    assert _has(found, name), (f"{where} is gone on {_installed()} (checked on {CHECKED_ON}); find where it moved "
                               "and update adapters/airflow_private.py")


def test_the_helpers_answer_on_the_installed_airflow():
    failed, timed_out = airflow_private.trigger_failure()
    assert failed == "__fail__" and timed_out == "Trigger timeout"
    assert airflow_private.stats_modules() and airflow_private.hostname()
    from airflow.sdk import RetryDecision, RetryPolicy  # the public names serve on the checked versions

    assert airflow_private.retry_policy_classes() == (RetryDecision, RetryPolicy)
    from airflow.sdk import BaseXCom

    assert issubclass(airflow_private.xcom_backend(), BaseXCom)  # [core] xcom_backend: BaseXCom by default
    request = airflow_private.get_task_states_request(dag_id="d", task_ids=["t"], run_ids=["r"], map_index=None)
    assert type(request).__name__ == "GetTaskStates"


def internal_imports(provider: Path = PROVIDER) -> list[str]:
    """Every import of an Airflow internal outside adapters/airflow_private.py."""
    problems = []
    for module in sorted(provider.rglob("*.py")):
        if module.name == "airflow_private.py":
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            problems += [f"{module.relative_to(provider)}:{node.lineno}: {n}" for n in names
                         if n.startswith(INTERNAL)]
    return problems


def test_no_other_module_imports_an_airflow_internal():
    assert internal_imports() == []


@pytest.mark.parametrize("line, refused", [
    ("from airflow.sdk.execution_time.comms import SetXCom", True), ("import airflow.utils.net", True),
    ("from airflow.sdk import conf, RetryPolicy", False), ("from airflow.triggers.base import BaseTrigger", False),
])
def test_an_internal_import_is_refused(tmp_path, line, refused):
    (tmp_path / "probe.py").write_text(line + "\n")
    assert bool(internal_imports(tmp_path)) is refused
