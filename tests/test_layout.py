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
    ("core/definition", True), ("core/definition/description/spec", True), ("core/definition/spec", False),
    ("core/spec", False), ("core/no_such_module", False),
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
        for module in sorted((core / package).rglob("*.py")):
            tree = ast.parse(module.read_text())
            type_only = _type_checking_nodes(tree)
            for node in ast.walk(tree):
                if id(node) in type_only:
                    continue
                for target in _core_targets(node, package):
                    if target not in allowed:
                        problems.append(f"core/{module.relative_to(core)}:{node.lineno} imports core.{target}: "
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


# ---- the rooms' edges: the rehearsal's knowledge in the rehearsal, the DAGs' kinds from the registry ---------------

PROVIDER = ROOTS[""]
# What only the rehearsal reads: the fault table (every name mtc_local/faults/kinds.py defines), the fault plan's
# annotation and this machine's readiness checks. The provider reaches them through the local kind's rules and
# backend, never by name.
FAULT_TABLE = ROOTS["rehearsal"] / "faults" / "kinds.py"
REHEARSAL_ONLY = frozenset(
    [t.id for node in ast.parse(FAULT_TABLE.read_text()).body if isinstance(node, ast.AnnAssign)
     for t in [node.target] if isinstance(t, ast.Name)]
    + [node.name for node in ast.parse(FAULT_TABLE.read_text()).body if isinstance(node, ast.ClassDef)]
    + ["FAULT_PLAN_ANNOTATION", "evaluate_local_machine"])


def _names(tree: ast.AST) -> set[str]:
    """Every name a module defines, imports or reads (attributes included)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update({node.name.rsplit(".", 1)[-1], node.asname or ""})
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
    return found


def rehearsal_names_in(provider: Path = PROVIDER) -> list[str]:
    """Every provider module that names a rehearsal-only name."""
    problems = []
    for module in sorted(provider.rglob("*.py")):
        named = _names(ast.parse(module.read_text())) & REHEARSAL_ONLY
        if named:
            problems.append(f"{module.relative_to(provider)}: {', '.join(sorted(named))}")
    return problems


def test_the_fault_table_and_the_machine_checks_are_the_rehearsals():
    assert {"FAULT_KINDS", "FaultKind", "START_FAULT_KINDS", "FAULT_PLAN_ANNOTATION",
            "evaluate_local_machine"} <= REHEARSAL_ONLY
    assert rehearsal_names_in() == []


@pytest.mark.parametrize("line, refused", [
    ("from mtc_local.faults.kinds import FAULT_KINDS", True), ("kinds = vocabulary.HOST_FAULT_KINDS", True),
    ("def evaluate_local_machine(facts): ...", True), ("annotations[V.FAULT_PLAN_ANNOTATION] = plan", True),
    ("from mtc_provider import targets", False),
])
def test_a_rehearsal_name_in_the_provider_is_refused(tmp_path, line, refused):
    (tmp_path / "probe.py").write_text(line + "\n")
    assert bool(rehearsal_names_in(tmp_path)) is refused


# The hook (hooks/jobset.py) is the only JobSet client of operators, sensors, triggers, links and the CLI: the
# factories and Kubernetes clients it stands on are named only by it, the targets that build them and the adapters.
CLIENT_ROOMS = ("hooks", "targets", "adapters")
CLIENT_FACTORIES = frozenset({"jobset_api", "async_jobset_api", "lock_api", "pod_logs_for", "KubernetesJobSetApi",
                              "AsyncKubernetesJobSetApi", "CoreV1Api", "CustomObjectsApi"})


def clients_beside_the_hook(provider: Path = PROVIDER) -> list[str]:
    """Every provider module outside CLIENT_ROOMS that builds a JobSet (or Kubernetes) client of its own."""
    problems = []
    for module in sorted(provider.rglob("*.py")):
        if module.relative_to(provider).parts[0] in CLIENT_ROOMS:
            continue
        named = _names(ast.parse(module.read_text())) & CLIENT_FACTORIES
        if named:
            problems.append(f"{module.relative_to(provider)}: {', '.join(sorted(named))} (use MtcJobSetHook)")
    return problems


def test_the_hook_is_the_only_jobset_client():
    assert clients_beside_the_hook() == []


@pytest.mark.parametrize("line, refused", [
    ("api = targets.jobset_api(connection)", True), ("RunLock(lock_api(connection, api), 'ns', 'run', {})", True),
    ("api = MtcJobSetHook(connection=connection).api", False),
])
def test_a_client_beside_the_hook_is_refused(tmp_path, line, refused):
    (tmp_path / "probe.py").write_text(line + "\n")
    assert bool(clients_beside_the_hook(tmp_path)) is refused


DAGS = REPO / "dags"


def kind_lists(dags: Path = DAGS) -> list[str]:
    """Every list, tuple or set literal in dags/*.py holding two or more target kinds: the registry's kinds
    (mtc_provider.targets.kinds(), the installed ones) are what a DAG offers, never a list of its own."""
    from mtc_provider import targets

    kinds = set(targets.kinds()) | {"local", "gke", "kubernetes"}
    problems = []
    for dag in sorted(dags.glob("*.py")):
        for node in ast.walk(ast.parse(dag.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                named = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in kinds]
                if len(named) >= 2:
                    problems.append(f"{dag.name}:{node.lineno}: {named} (use the registry's kinds)")
    return problems


def test_the_dags_take_their_kinds_from_the_registry():
    assert kind_lists() == []


@pytest.mark.parametrize("line, refused", [
    ('Param("local", enum=["local", "gke", "kubernetes"])', True), ('KINDS = ("gke", "local")', True),
    ('TARGET = {"kind": "gke", "image": "local"}', False), ('Param("local", enum=installed_kinds())', False),
])
def test_a_kind_list_in_a_dag_is_refused(tmp_path, line, refused):
    (tmp_path / "dag.py").write_text(line + "\n")
    assert bool(kind_lists(tmp_path)) is refused
