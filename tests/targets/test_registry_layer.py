"""`targets/registry.py` is below `target.py` (issue 36 found the two importing each other inside functions): the
registry owns kinds and builds a target from its dict form; `mtc_provider.target` re-exports that and adds the
Google connection helpers. Read from the source, function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import mtc_provider.targets.registry as registry


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_registry_does_not_import_the_target_module():
    assert "mtc_provider.target" not in imported_modules(Path(registry.__file__))


def test_the_target_module_serves_the_registrys_target_from_dict():
    import mtc_provider.target as target

    assert target.target_from_dict is registry.target_from_dict
    gke = target.target_from_dict({"project_id": "p", "location": "us-central1", "cluster_name": "c"})
    assert gke.kind == "gke"  # a dict naming a cluster and no kind is a GKE target, as before
