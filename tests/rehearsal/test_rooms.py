"""The rehearsal's rooms import each other one way only: the cluster (API server, store, controller) and the runner
(processes, faults) share a home's state and token through mtc_local.shared, the runner imports nothing of the
cluster, and no room imports the supervisor (the one process that puts them together). Read from the source (every
`import`, also inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

LOCAL = Path(__file__).resolve().parents[2] / "rehearsal" / "mtc_local"


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "mtc_local" and len(parts) > 1 else None


def room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in LOCAL.rglob("*.py"):
        relative = path.relative_to(LOCAL)
        room = relative.parts[0].removesuffix(".py") if len(relative.parts) > 1 else relative.stem
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                other = _room(name)
                if other and other != room and (LOCAL / other).is_dir() | (LOCAL / f"{other}.py").is_file():
                    graph.setdefault(room, set()).add(other)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, path = [], []

    def visit(node: str) -> None:
        if node in path:
            found.append(path[path.index(node):] + [node])
            return
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        path.pop()

    for start in sorted(graph):
        visit(start)
    return found


def test_the_rooms_have_no_import_cycle() -> None:
    graph = room_graph()
    assert "cluster" in graph and "runner" in graph, graph  # the walk sees them
    assert cycles(graph) == []
    assert "cluster" not in graph["runner"]
    assert {"cluster", "runner"} <= graph["supervisor"]
    assert not [room for room, uses in graph.items() if "supervisor" in uses and room != "__main__"]
    assert "shared" in graph["cluster"] and "shared" in graph["runner"]


def test_the_cycle_finder_finds_one() -> None:
    assert cycles({"cluster": {"runner"}, "runner": {"cluster"}}) == [["cluster", "runner", "cluster"],
                                                                       ["runner", "cluster", "runner"]]
