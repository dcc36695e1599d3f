"""The environment a local pod starts from: what the workload needs to run, never the Airflow process's secrets.

A GKE pod sees only what its container declares (plus what Kubernetes and JobSet add); a local pod gets the same
declared variables (manifest.pod_spec adds them) on top of this short list taken from the runner's environment:
how to find Python and its packages, locale and time zone, temporary files, and JAX/XLA/TensorStore settings.
Connections (AIRFLOW_CONN_*), cloud credentials and any other variable of the parent are left out.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

PASSED_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
        "VIRTUAL_ENV", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONWARNINGS",
        "OMP_NUM_THREADS", "COVERAGE_PROCESS_START",
    }
)
# Settings of the libraries the workload runs (JAX, XLA, TensorStore under Orbax), the locale, and the local
# bucket's cost model (local/bucket_cost.py: it stands for the persistent tier's latency and bandwidth).
PASSED_PREFIXES = ("LC_", "JAX_", "XLA_", "TF_CPP_", "TENSORSTORE_", "MTC_BUCKET_")


def passes(name: str) -> bool:
    return name in PASSED_NAMES or name.startswith(PASSED_PREFIXES)


def workload_environment(parent: Mapping[str, str]) -> dict[str, str]:
    """The variables of `parent` a workload needs, with the runner's interpreter first on PATH."""
    env = {name: value for name, value in parent.items() if passes(name)}
    # `python3` inside a shell script must also be the runner's interpreter, so its packages import.
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH", os.defpath)]))
    return env
