"""The launch worker's Celery configuration (mtc_provider.celery_preload): Airflow's defaults, plus the modules a
launch try imports on first use, which a real Celery app's loader imports in the worker's main process
(celery.loaders.base.BaseLoader.init_worker, called by WorkController before the pool forks). The end-to-end effect
is measured by `python -m benchmarks.scale_rehearsal` (docs/benchmarks.md, section 8)."""

from __future__ import annotations

import subprocess
import sys

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

from mtc_provider.celery_preload import CELERY_CONFIG, PRELOAD


def test_keeps_airflows_defaults_and_adds_the_preload_imports():
    assert {k: v for k, v in CELERY_CONFIG.items() if k != "imports"} == \
        {k: v for k, v in DEFAULT_CELERY_CONFIG.items() if k != "imports"}
    assert set(PRELOAD) <= set(CELERY_CONFIG["imports"])


def test_a_celery_worker_loader_imports_them_before_any_task():
    """In a fresh interpreter: Celery's own loader, as a worker's main process runs it, leaves them imported."""
    code = (
        "import sys, celery\n"
        "from mtc_provider.celery_preload import CELERY_CONFIG, PRELOAD\n"
        "app = celery.Celery('t', config_source=CELERY_CONFIG)\n"
        "assert not any(m in sys.modules for m in ('kubernetes.client', 'mtc_provider.operators.jobset'))\n"
        "app.loader.init_worker()\n"
        "missing = [m for m in PRELOAD if m not in sys.modules]\n"
        "assert not missing, missing\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
