"""What every launch try imports on first use, for the process its task processes are forked from to import once.

A launch try's first request imports the Kubernetes client and the cncf.kubernetes hooks, and its checkpoint listing
the google GCS hook: 3.35 s of its start on an idle 2-core machine, tens of seconds when many tries start together
(docs/benchmarks.md, section 2). A process that imports them before forking its task processes gives every try them
for nothing. Two ways, both importing `PRELOAD` (docs/deployment.md, "Worker slots on the resubmission path"):

- Celery: the launch worker's `mtc_provider.celery_preload.CELERY_CONFIG` (`imports`, before the pool forks);
- the LocalExecutor: `[core] executor = mtc_provider.executors.local.PreloadLocalExecutor` (`preload()` in the
  scheduler before it forks its workers).

Importing this module imports nothing heavy: only `preload()` does.
"""

from __future__ import annotations

import importlib
from typing import Iterable

PRELOAD = (
    "kubernetes.client",
    "airflow.providers.cncf.kubernetes.hooks.kubernetes",
    "airflow.providers.google.cloud.hooks.gcs",
    "airflow.providers.google.cloud.hooks.kubernetes_engine",
    "mtc_provider.operators.jobset",
    "mtc_provider.adapters.kubernetes",
    "mtc_provider.adapters.checkpoint_stores",
    "mtc_provider.adapters.gcs_hook",
)


def preload(modules: Iterable[str] = PRELOAD) -> tuple[str, ...]:
    """Import `modules` (each an error if it cannot be imported: a preload that silently does nothing is a slow try
    nobody explains); the names, in order."""
    names = tuple(modules)
    for name in names:
        importlib.import_module(name)
    return names
