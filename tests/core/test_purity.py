"""The core imports no Airflow, Kubernetes client or network library: checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ("airflow", "kubernetes", "kubernetes_asyncio", "google", "requests", "aiohttp", "httpx")

SCRIPT = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys

    BLOCKED = {blocked!r}
    # A *-nspkg.pth file in site-packages creates empty `google` namespace modules at start-up:
    # only what importing the core adds counts.
    before = set(sys.modules)

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked in the pure core: {{name}}")
            return None

    sys.meta_path.insert(0, Block())
    import mtc_provider.core as core

    imported = []
    for info in pkgutil.iter_modules(core.__path__):
        importlib.import_module(f"mtc_provider.core.{{info.name}}")
        imported.append(info.name)
    leaked = sorted(name for name in set(sys.modules) - before if name.split(".")[0] in BLOCKED)
    print(json.dumps({{"imported": imported, "leaked": leaked}}))
    """
)


def run(blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=blocked)], capture_output=True, text=True, timeout=60
    )


def test_every_core_module_imports_with_io_libraries_blocked() -> None:
    import json

    result = run(BLOCKED)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    expected = {"errors", "spec", "tpu", "sizing", "versions", "names", "locations", "iam", "labels",
                "maxtext", "jobset", "checkpoint_config", "plan"}
    assert expected <= set(report["imported"])
    assert report["leaked"] == []


def test_the_blocker_does_block() -> None:
    """The check can fail: blocking a module the core does use makes the import fail."""
    result = run(("decimal",))
    assert result.returncode != 0 and "blocked in the pure core: decimal" in result.stderr
