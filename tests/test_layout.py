"""The tests are laid out like the code (issue 25), so a change finds its tests by path.

A folder of tests (one holding a `test_*.py`) mirrors a room of the code: `tests/<path>` tests
`provider/mtc_provider/<path>` and `tests/rehearsal/<path>` tests `rehearsal/mtc_local/<path>`, where the room is a
package folder or a module (`tests/cli/` for `cli/`, `tests/operators/gcp/` for `operators/gcp.py`). Suites that
cross every room keep folders of their own, and the shared helpers live in folders that hold no tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
ROOTS = {"": REPO / "provider" / "mtc_provider", "rehearsal": REPO / "rehearsal" / "mtc_local"}
# Suites across the rooms: whole runs, the deployed topology, the docs, the wheels, golden files, benchmarks, DAGs.
CROSS_CUTTING = {"acceptance", "benchmarks", "chaos", "conformance", "dags", "deploy", "docs", "e2e", "golden",
                 "package"}
# Helpers shared by the folders above: the test doubles (one per API), fixtures and helper modules, test data.
HELPERS = {"doubles", "support", "data"}


def code_room(parts: tuple[str, ...]) -> Path | None:
    """The code the folder `tests/<parts>` mirrors (a package folder or a module), or None when there is none."""
    root, rest = (ROOTS["rehearsal"], parts[1:]) if parts[0] == "rehearsal" else (ROOTS[""], parts)
    room = root.joinpath(*rest)
    if room.is_dir() and (not rest or (room / "__init__.py").exists()):
        return room
    module = room.with_suffix(".py")
    return module if rest and module.is_file() else None


def misplaced(tests: Path) -> list[str]:
    """Every folder of tests under `tests` that mirrors no code room, and every helper folder that holds tests."""
    problems = []
    for test in sorted(tests.rglob("test_*.py")):
        folder = test.parent
        if folder == tests:
            continue
        top = folder.relative_to(tests).parts[0]
        if top in HELPERS:
            problems.append(f"{test.relative_to(tests)}: {top}/ holds helpers only; put the test beside the code "
                            "it tests")
        elif top not in CROSS_CUTTING and code_room(folder.relative_to(tests).parts) is None:
            problems.append(f"{folder.relative_to(tests)}/: mirrors no code folder or module under "
                            f"provider/mtc_provider/ or rehearsal/mtc_local/ (cross-cutting suites allowed: "
                            f"{', '.join(sorted(CROSS_CUTTING))})")
    return sorted(set(problems))


def test_every_folder_of_tests_mirrors_a_room_of_the_code():
    assert misplaced(TESTS) == []


@pytest.mark.parametrize("folder, mirrors", [
    ("targets/gke", True), ("targets/kubernetes", True), ("operators/gcp", True), ("cli", True),
    ("rehearsal/cluster", True), ("rehearsal/workload", True), ("rehearsal", True), ("core", True),
    ("gcp", False), ("jobset", False), ("local", False), ("rehearsal/jobset", False), ("targets/eks", False),
    ("core/definition", True), ("core/definition/spec", True), ("core/spec", False), ("core/no_such_module", False),
    ("operators/gcp/more", False),
])
def test_a_folder_of_tests_passes_only_when_it_mirrors_a_package_or_a_module(tmp_path, folder, mirrors):
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "test_x.py").write_text("")
    assert (misplaced(tmp_path) == []) is mirrors, misplaced(tmp_path)


def test_cross_cutting_suites_and_top_level_tests_need_no_room(tmp_path):
    for folder in ("e2e", "golden/sub", "."):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "test_x.py").write_text("")
    assert misplaced(tmp_path) == []


def test_a_helper_folder_holding_a_test_is_refused(tmp_path):
    (tmp_path / "doubles").mkdir()
    (tmp_path / "doubles" / "test_fake.py").write_text("")
    assert misplaced(tmp_path) == ["doubles/test_fake.py: doubles/ holds helpers only; put the test beside the code "
                                   "it tests"]


# ---- the core's floors: each sub-package imports only those below it ----------------------------------------------

CORE = ROOTS[""] / "core"
# The floors, ground first (each package's __init__.py docstring says the same). A module may import its own
# package and the packages below; an import of a higher floor is allowed only under `if TYPE_CHECKING:`.
CORE_FLOORS = ("basics", "measure", "definition", "attempt", "view")
# Modules at core/'s root that a floor may import (none: the rehearsal's faults moved to mtc_local.faults).
CORE_ROOT_ALLOWED: dict[str, str] = {}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    nodes = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            nodes.update(id(inner) for inner in ast.walk(node))
    return nodes


def _core_targets(node: ast.AST, package: str) -> list[str]:
    """The core rooms (`attempt`, `fault_plan`, ...) an import names; relative imports are resolved from `package`."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # `from .x import y` in core/<package>/: level 1 is the package, 2 is core
            base = ".".join(["mtc_provider", "core", package][: 4 - node.level] + ([base] if base else []))
        names = [base] if base != "mtc_provider.core" else [f"{base}.{alias.name}" for alias in node.names]
    else:
        return []
    return [name.split(".")[2] for name in names if name.startswith("mtc_provider.core.")]


def core_back_arrows(core: Path = CORE) -> list[str]:
    """Every import in core/<floor>/ of a higher floor (or of a room it may not use), not under TYPE_CHECKING."""
    problems = []
    for floor, package in enumerate(CORE_FLOORS):
        allowed = set(CORE_FLOORS[: floor + 1]) | {m for m, user in CORE_ROOT_ALLOWED.items() if user == package}
        for module in sorted((core / package).glob("*.py")):
            tree = ast.parse(module.read_text())
            type_only = _type_checking_nodes(tree)
            for node in ast.walk(tree):
                if id(node) in type_only:
                    continue
                for target in _core_targets(node, package):
                    if target not in allowed:
                        problems.append(f"core/{package}/{module.name}:{node.lineno} imports core.{target}: "
                                        f"core.{package} may import only {', '.join(sorted(allowed))}")
    return problems


def test_every_core_module_stands_in_a_floor_or_is_named():
    rooms = {p.stem for p in CORE.glob("*.py")} - {"__init__"}
    assert rooms == set(), rooms
    assert {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(CORE_FLOORS)


def test_no_core_floor_imports_a_higher_floor():
    assert core_back_arrows() == []


@pytest.mark.parametrize("package, line, type_only, refused", [
    ("basics", "from mtc_provider.core.attempt.status import JobSetState", False, True),
    ("definition", "from mtc_provider.core.view import goodput", False, True),
    ("definition", "import mtc_provider.core.attempt.outcomes", False, True),
    ("measure", "from mtc_provider.core import fault_plan", False, True),
    ("attempt", "from ..view.goodput import compute_goodput", False, True),
    ("definition", "from mtc_provider.core.view.goodput import Timeline", True, False),
    ("view", "from mtc_provider.core.attempt import outcomes", False, False),
    ("definition", "from mtc_provider.core.fault_plan import check_fault_plan", False, True),
    ("measure", "from .progress import RESTORABLE", False, False),
])
def test_a_back_arrow_fails_the_floor_check(tmp_path, package, line, type_only, refused):
    for floor in CORE_FLOORS:
        (tmp_path / floor).mkdir()
    body = f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {line}\n" if type_only else line + "\n"
    (tmp_path / package / "probe.py").write_text(body)
    assert bool(core_back_arrows(tmp_path)) is refused, core_back_arrows(tmp_path)
