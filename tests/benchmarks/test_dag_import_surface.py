"""The sample DAG files' import surface: what parsing a DAG file loads is paid on every parse by the DAG
processor (benchmark 5), so triggers and the spec machinery are imported where they run (execute, defer,
execute_complete, inside @task bodies), never at a DAG file's top level.

Each DAG file is imported in a fresh interpreter (a subprocess: this test process has long imported everything)
and its sys.modules is checked. One exception is structural: the evaluation DAG is scheduled on an asset whose
AssetWatcher must hold a trigger *instance* at parse time (Airflow validates `AssetWatcher.trigger` as a
BaseEventTrigger), so that DAG loads the checkpoint trigger module, and only that one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = ("mtc_resilient_training.py", "mtc_cluster_setup.py", "mtc_checkpoint_evaluation.py")
# Never at parse time: trigger modules, the run description (spec, params, sizing, locations) and rendering.
FORBIDDEN_PREFIXES = ("mtc_provider.triggers.", "airflow.triggers.")
FORBIDDEN = {"mtc_provider.core.definition.description.spec", "mtc_provider.core.definition.description.params", "mtc_provider.core.definition.render.jobset_manifest",
             "mtc_provider.core.definition.shape.sizing", "mtc_provider.core.definition.description.locations", "mtc_provider.core.definition.cluster.readiness",
             "mtc_provider.core.view.goodput", "mtc_provider.targets.gke.cluster", "mtc_provider.adapters.gcs_bucket"}
# AssetWatcher(trigger=...) needs the trigger instance (and so its module and Airflow's trigger base) to exist.
# (a name ending in "." allows the package: airflow.triggers.base pulls a few sibling modules)
ALLOWED = {"mtc_provider.triggers.checkpoint", "airflow.triggers."}
ALLOWED_IN = {"mtc_checkpoint_evaluation.py": ALLOWED}

PROBE = """
import json, runpy, sys
import airflow.sdk  # what the DAG processor pre-imports (the `airflow.*` modules a DAG file names)
before = set(sys.modules)
runpy.run_path(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def modules_loaded_by(dag_file: Path, tmp_path: Path) -> list[str]:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(dag_file)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def heavy_modules(loaded: list[str], allowed: set[str] = frozenset()) -> list[str]:
    def is_allowed(module: str) -> bool:
        return any(module == a or (a.endswith(".") and module.startswith(a)) for a in allowed)

    return sorted(m for m in loaded if (m in FORBIDDEN or m.startswith(FORBIDDEN_PREFIXES)) and not is_allowed(m))


def test_the_check_recognises_triggers_and_the_spec_machinery():
    loaded = ["mtc_provider.dag_support", "mtc_provider.triggers.jobset", "airflow.triggers.base",
              "airflow.triggers.temporal", "mtc_provider.core.definition.description.spec", "mtc_provider.core.definition.shape.tpu"]
    assert heavy_modules(loaded) == ["airflow.triggers.base", "airflow.triggers.temporal", "mtc_provider.core.definition.description.spec",
                                     "mtc_provider.triggers.jobset"]
    assert heavy_modules(loaded, ALLOWED) == ["mtc_provider.core.definition.description.spec", "mtc_provider.triggers.jobset"]


@pytest.mark.parametrize("dag", DAGS)
def test_a_sample_dag_file_imports_no_trigger_and_no_spec_machinery(dag, tmp_path):
    loaded = modules_loaded_by(REPO / "dags" / dag, tmp_path)
    assert "mtc_provider.dag_support" in loaded  # the probe did import the DAG file's provider glue
    assert heavy_modules(loaded, ALLOWED_IN.get(dag, set())) == []
