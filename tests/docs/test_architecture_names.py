"""docs/architecture.md names files, folders and functions of the code it walks: each one must exist, so a move or
a rename that leaves the page stale fails here (the walks of an interruption name them file by file)."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from tests.conftest import REPO

PAGE = REPO / "docs" / "architecture.md"
# Where a path on the page may be rooted: the repository, the provider's package, the rehearsal's.
ROOTS = (REPO, REPO / "provider" / "mtc_provider", REPO / "rehearsal", REPO / "rehearsal" / "mtc_local", REPO / "provider")
# Paths the page names that are not ours, or are named relative to the bullet they stand in.
ELSEWHERE = {"operators/job.py", "operators/pod.py", "triggers/job.py", "triggers/pod.py"}  # cncf.kubernetes'
RELATIVE = {"crds/": REPO / "rehearsal" / "mtc_local" / "cluster" / "crds"}  # in the `cluster/` bullet
PATH = re.compile(r"`([A-Za-z_][\w./-]*/[\w./-]*)`")
PATH_THEN_NAME = re.compile(r"`([\w/]+\.py)` `(\w+)`")
DOTTED = re.compile(r"`((?:mtc_provider|mtc_local|core|adapters|triggers|operators|hooks|targets)\.[\w.]+)`")


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def found(path: str) -> Path | None:
    return next((root / path for root in ROOTS if (root / path).exists()), None)


@lru_cache(maxsize=None)
def defined(file: Path) -> frozenset[str]:
    """Every name a module defines or re-exports: functions, classes, methods, assignments, imported names."""
    names = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return frozenset(names)


def module_file(dotted: str) -> tuple[Path | None, list[str]]:
    """The longest module prefix of `dotted` that is a file, and the names after it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut])
        for candidate in (f"{path}.py", f"{path}/__init__.py"):
            hit = found(candidate.removeprefix("mtc_provider/").removeprefix("mtc_local/")) \
                if parts[0] in ("mtc_provider", "mtc_local") else found(candidate)
            if hit is not None:
                return hit, parts[cut:]
    return None, parts


def test_every_path_the_page_names_exists():
    paths = {p for p in PATH.findall(page()) if p.endswith(("/", ".py", ".md")) and "<" not in p}
    assert len(paths) > 50
    missing = sorted(p for p in paths - ELSEWHERE if found(p) is None and not RELATIVE.get(p, REPO / "-").exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_function_named_beside_its_file_is_defined_there():
    pairs = PATH_THEN_NAME.findall(page())
    assert len(pairs) > 20
    wrong = sorted(f"{path} {name}" for path, name in pairs
                   if (file := found(path)) is not None and name not in defined(file))
    assert not wrong, f"docs/architecture.md names functions their files do not define: {wrong}"


def test_every_dotted_name_resolves():
    names = set(DOTTED.findall(page()))
    assert len(names) > 10
    wrong = []
    for dotted in sorted(names):
        file, rest = module_file(dotted)
        if file is None or (rest and rest[0] not in defined(file)):
            wrong.append(dotted)
    assert not wrong, f"docs/architecture.md names modules or functions that do not exist: {wrong}"
