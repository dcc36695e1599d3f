"""The real MaxText release in its own Python 3.12 environment, and a runner for its config loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent / "maxtext_probe.py"
sys.path.insert(0, str(REPO / "scripts"))
import maxtext_env  # noqa: E402

PROBE_TIMEOUT_S = 600


@pytest.fixture(scope="session")
def maxtext_python() -> Path:
    """MaxText 0.2.5's interpreter, one environment for the session: the config-loader probe and the CPU training
    both use the trainer's list (`0.2.5-train`, which holds every pin of the loader's `0.2.5` list: issue 36); a
    build failure fails the test with the reason (never a skip)."""
    try:
        return maxtext_env.ensure_env("0.2.5-train")
    except maxtext_env.EnvironmentBuildError as err:
        pytest.fail(f"could not build the MaxText 0.2.5 training environment (scripts/maxtext_env.py): {err}")


def run_probe(python: Path, cases: list[dict[str, Any]], cwd: Path) -> dict[str, dict[str, Any]]:
    """MaxText's pyconfig.initialize on each case, in one process; results by case name."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(python), str(PROBE)], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=PROBE_TIMEOUT_S)
    assert done.returncode == 0, f"the probe crashed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {result["name"]: result for result in results}
