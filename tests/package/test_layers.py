"""The local target stands apart: no module of the provider imports `mtc_local` (the mtc-local distribution).

Its programs run as processes (`python -m mtc_local...`, a string, not an import), the provider finds its target
through the `mtc_provider.targets` entry point, and reaches its cluster through the same adapters as GKE's, so what
users rehearse locally is the code that runs on GKE. Read from the source (every `import`, also inside functions),
not by importing (tests/core/test_purity.py imports every module with mtc_local blocked).
"""

from __future__ import annotations

import ast
from pathlib import Path

PROVIDER = Path(__file__).resolve().parents[2] / "provider" / "mtc_provider"
LOCAL = "mtc_local"
# Imports of the local target still to be replaced, as `path: module`. An entry the code no longer has fails too.
NOT_YET_REPLACED: set[str] = set()


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_nothing_outside_the_local_target_imports_it():
    offending = set()
    for path in sorted(PROVIDER.rglob("*.py")):
        relative = path.relative_to(PROVIDER).as_posix()
        for module in _imports(path):
            if module == LOCAL or module.startswith(LOCAL + "."):
                top = ".".join(module.split(".")[:2])  # mtc_local.<part>
                offending.add(f"{relative}: {top}")
    assert offending == NOT_YET_REPLACED


def test_the_rehearsal_is_not_in_the_provider_package():
    assert not (PROVIDER / "local").exists()
    assert (PROVIDER.parents[1] / "rehearsal" / "mtc_local" / "cluster" / "apiserver.py").is_file()


def test_no_trigger_imports_an_operator_or_a_sensor():
    """Triggers are glue beside the operators (docs/architecture.md): what both need lives in adapters or core."""
    offending = {f"{path.name}: {module}" for path in sorted((PROVIDER / "triggers").glob("*.py"))
                 for module in _imports(path)
                 if module.startswith(("mtc_provider.operators", "mtc_provider.sensors"))}
    assert offending == set()
