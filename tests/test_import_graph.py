"""The package's import graph is acyclic (every import counts: module-level and inside functions).

A cycle means two modules each need the other; whichever loads first sees the other half-built,
which is why function-level imports are counted too: they only hide a cycle until call time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "workbench"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imported_modules(path: Path, root: Path, known: set[str]) -> set[str]:
    """The package's modules `path` imports, anywhere in the file."""
    this = module_name(path, root)
    package = package_of(this, path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from pkg import name` needs pkg.name when that is a submodule, else pkg's namespace.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            # An attribute path (`import a.b` where b is not a module) resolves to its module.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != this:
                found.add(target)
    return found


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    """module -> the package's modules it imports (module level or inside functions)."""
    files = {module_name(path, root): path for path in root.rglob("*.py")}
    known = set(files)
    return {module: imported_modules(path, root, known) for module, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a closed path [a, b, ..., a], or None when the graph is acyclic."""
    unvisited, on_path, done = 0, 1, 2
    state = {module: unvisited for module in graph}
    for start in sorted(graph):
        if state[start] != unvisited:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = on_path
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = done
                stack.pop()
            elif state[nxt] == on_path:
                return path[path.index(nxt):] + [nxt]
            elif state[nxt] == unvisited:
                state[nxt] = on_path
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_find_cycle_reports_a_closed_path_and_none_for_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_resolve_to_the_package_modules_they_run(tmp_path):
    """Relative imports, `from package import submodule`, imports inside functions, and names
    that are attributes (not modules) all resolve to the module whose code runs."""
    package = tmp_path / "workbench"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import leaf\n")
    (package / "sub" / "leaf.py").write_text("def f():\n    from ..top import g\n    import workbench.sub\n")
    (package / "top.py").write_text("from workbench.sub.leaf import f\nfrom workbench import top\n")
    graph = import_graph(package)
    assert graph["workbench.sub"] == {"workbench.sub.leaf"}
    assert graph["workbench.sub.leaf"] == {"workbench.top", "workbench.sub"}
    assert graph["workbench.top"] == {"workbench.sub.leaf"}  # itself is no edge
    assert find_cycle(graph) == ["workbench.sub", "workbench.sub.leaf", "workbench.sub"]


def test_workbench_import_graph_is_acyclic():
    graph = import_graph()
    assert len(graph) > 50  # the walk found the package
    cycle = find_cycle(graph)
    if cycle is not None:
        pytest.fail("import cycle: " + " -> ".join(cycle))
