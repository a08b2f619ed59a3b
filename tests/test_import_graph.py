"""No import circle among the package's own modules.

The graph has an edge from a module to each package module it imports, read with
``ast``: ``import learn_parallel.x``, ``from learn_parallel.x import y``, and
``from learn_parallel import x`` where ``x`` is a submodule (an edge to ``x``, not to
the package). A circle closed by an import inside a function still is one: the
deferred import only hides it from import order, as ``devices`` and the simulator
once hid theirs.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "learn_parallel"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path], deferred: bool) -> set[str]:
    """The package modules that module ``name`` imports (inside functions too if ``deferred``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree) if deferred else tree.body
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from .y import z
                anchor = package[: len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    targets.add(submodule)
                elif base in modules:
                    targets.add(base)
    targets.discard(name)
    return targets


def import_graph(deferred: bool) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules, deferred) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle, as the strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_graph_sees_submodules_imported_from_their_package():
    graph = import_graph(deferred=True)
    assert "learn_parallel.sim" in graph["learn_parallel.devices"]
    assert "learn_parallel.sim.tensor" in graph["learn_parallel.sim.comm"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_circle_among_module_level_imports():
    assert circles(import_graph(deferred=False)) == []


def test_no_circle_through_deferred_imports_anywhere_in_the_package():
    assert circles(import_graph(deferred=True)) == []


def _in_sim(module: str) -> bool:
    return module == "learn_parallel.sim" or module.startswith("learn_parallel.sim.")


def test_the_simulator_imports_nothing_from_the_rest_of_the_package():
    graph = import_graph(deferred=True)
    outside = {f"{m} -> {t}" for m, ts in graph.items() if _in_sim(m) for t in ts if not _in_sim(t)}
    assert outside == set()


# Floors, lowest first: a module imports only from its own floor or the ones below it.
# The package itself (learn_parallel/__init__.py) re-exports the core, the variants and
# the ladder, so it stands on the ladder's floor; its command line, on top of everything.
FLOORS = {"sim": 0, "core": 1, "variants": 2, "ladder": 3, "lab": 4, "classroom": 4}
TOP = 5


def _floor(module: str) -> int:
    if module == "learn_parallel":
        return FLOORS["ladder"]
    if module == "learn_parallel.__main__":
        return TOP
    return FLOORS.get(module.split(".")[1], FLOORS["core"])


def test_no_import_runs_back_up_the_floors():
    graph = import_graph(deferred=True)
    upward = {f"{m} -> {t}" for m, ts in graph.items() for t in ts if _floor(t) > _floor(m)}
    assert upward == set(), "core <- variants <- ladder <- lab, classroom: move the code down"


def test_the_floors_are_read_from_the_module_names():
    assert [_floor(m) for m in ("learn_parallel.sim.tensor", "learn_parallel.devices")] == [0, 1]
    assert _floor("learn_parallel.variants.options") < _floor("learn_parallel.ladder.fast")
    assert _floor("learn_parallel.lab.measure") == _floor("learn_parallel.classroom.grade") == 4
    assert _floor("learn_parallel") == FLOORS["ladder"] < _floor("learn_parallel.__main__")
