"""The tests are laid out like the code (issue 25), so a change finds its tests by path.

A folder of tests (one holding a `test_*.py`) mirrors a room of the code: `tests/<path>` tests
`provider/mtc_provider/<path>` and `tests/rehearsal/<path>` tests `rehearsal/mtc_local/<path>`, where the room is a
package folder or a module (`tests/cli/` for `cli/`, `tests/operators/gcp/` for `operators/gcp.py`). Suites that
cross every room keep folders of their own, and the shared helpers live in folders that hold no tests.
"""

from __future__ import annotations

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
    ("core/spec", True), ("core/no_such_module", False), ("operators/gcp/more", False),
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
