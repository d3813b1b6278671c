"""The package's import graph: acyclic, layered, and free of re-export shims.

A cycle means two modules each need the other; whichever loads first sees the other half-built,
which is why function-level imports are counted too: they only hide a cycle until call time.

Layers: each top-level part of the package (a root module or a subpackage) sits in one layer of
``LAYERS`` and imports only from its own part or from parts in lower layers, so the folder tree reads
bottom-up as the architecture: the core, the units a run composes, the run, its results, execution,
the front ends. Imports under ``if TYPE_CHECKING:`` run no code and are left out of this rule only.

Shims: a name a module imports and hands on (``__all__``, an alias ``new = imported``, or an
import marked ``noqa: F401``) must be imported from that module by somebody; otherwise callers
should import it from its real home. A package's ``__init__`` is its front door (the API a notebook
imports), so it may hand on its own submodules' names unasked, and only those.
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


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (annotations only: no code runs)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            inside.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return inside


def imported_modules(path: Path, root: Path, known: set[str], *, runtime_only: bool = False) -> set[str]:
    """The package's modules `path` imports, anywhere in the file (``runtime_only``: not under TYPE_CHECKING)."""
    this = module_name(path, root)
    package = package_of(this, path)
    found: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = type_checking_nodes(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            # An attribute path (`import a.b` where b is not a module) resolves to its module.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != this:
                found.add(target)
    return found


def import_graph(root: Path = PACKAGE_ROOT, *, runtime_only: bool = False) -> dict[str, set[str]]:
    """module -> the package's modules it imports (module level or inside functions)."""
    files = {module_name(path, root): path for path in root.rglob("*.py")}
    known = set(files)
    return {module: imported_modules(path, root, known, runtime_only=runtime_only) for module, path in files.items()}


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
                return path[path.index(nxt) :] + [nxt]
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


# Bottom to top. A part may import from its own part and from lower layers; parts that share a
# layer are independent of each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),  # the one error vocabulary
    ("progress",),  # how often long work prints a plain progress line
    ("safe_io",),  # the one way to open a user's file (regular, bounded, budgeted YAML/JSON)
    ("registry",),  # named units
    ("tasks",),  # problems and gold answers
    ("batch",),  # rollouts and train batches
    ("metrics",),  # the canonical metric names (a contract every unit logs or reads by) and their computation
    ("algorithms", "health", "reward"),  # the registered units a run composes
    ("config",),  # a run's validated config, naming those units
    ("engine",),  # engine: trl: each setting -> TRL's GRPOConfig field, or refused (no TRL import)
    ("study", "tracking"),  # study YAML -> run configs; writing to MLflow
    ("rollout",),  # sampling engines
    ("models",),  # policies (the tiny CPU model is cold-started with the rollout's decoder)
    ("train",),  # the RL loop and its learners
    ("results",),  # reading runs back
    ("compare",),  # statistics over seeds
    ("viz",),  # figures, dashboards, MLflow saved views
    ("importers",),  # runs from TRL and verl; the TRL metric adapter the TRL engine's callback reuses
    ("execution",),  # one run, a study, the pool, workers (engine: trl too)
    ("search",),  # Optuna searches
    ("analysis",),  # what is decided and computed for a user: returned, never printed
    ("cli",),  # the command line: prints what analysis returns
    ("notebook",),  # the notebook API: analysis's results as objects (workbench.load_study)
)


def part_of(module: str) -> str | None:
    """The top-level part (root module or subpackage) of a module; None for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]], layers=LAYERS) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a part imports from its own layer's sibling or from above."""
    rank = {part: i for i, layer in enumerate(layers) for part in layer}
    bad = []
    for module, imported in sorted(graph.items()):
        part = part_of(module)
        for target in sorted(imported):
            other = part_of(target)
            if part is not None and other is not None and other != part and rank[other] >= rank[part]:
                bad.append((module, target))
    return bad


def test_upward_imports_are_found():
    graph = {
        "workbench.cli.main": {"workbench.config"},
        "workbench.config": {"workbench.cli.main"},
        "workbench.health.rules": {"workbench.reward.verify"},
    }
    assert upward_imports(graph) == [
        ("workbench.config", "workbench.cli.main"),
        ("workbench.health.rules", "workbench.reward.verify"),
    ]


def test_every_part_has_a_layer():
    parts = {part_of(module) for module in import_graph()} - {None}
    layered = {part for layer in LAYERS for part in layer}
    assert parts == layered, (
        f"parts without a layer: {sorted(parts - layered)}; layers naming no part: {sorted(layered - parts)}"
    )


def test_no_import_points_up_the_layers():
    bad = upward_imports(import_graph(runtime_only=True))
    assert not bad, "imports against the layer order (tests/test_import_graph.py LAYERS):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in bad
    )


def unexplained_local_imports(path: Path, repo: Path = PACKAGE_ROOT.parent) -> list[str]:
    """Imports of package modules inside functions with no comment on their line saying why (a heavy
    dependency deferred, a cycle avoided): anywhere else an import belongs at the top of the module."""
    source = path.read_text()
    lines = source.splitlines()
    bad = []
    for function in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            ours = (
                isinstance(node, ast.ImportFrom)
                and (node.level or (node.module or "").startswith("workbench"))
                or isinstance(node, ast.Import)
                and any(a.name.startswith("workbench") for a in node.names)
            )
            if ours and "#" not in lines[node.lineno - 1]:
                bad.append(f"{path.relative_to(repo)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return bad


def test_unexplained_local_imports_are_found(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from workbench.a import b\n    from workbench.c import d  # deferred: torch\n    import json\n"
    )
    assert unexplained_local_imports(module, tmp_path) == ["m.py:2: from workbench.a import b"]


def test_every_function_level_import_says_why():
    bad = [line for path in sorted(PACKAGE_ROOT.rglob("*.py")) for line in unexplained_local_imports(path)]
    assert not bad, "imports inside functions without a reason (move them up, or say why):\n" + "\n".join(bad)


def test_the_root_keeps_only_the_core():
    modules = sorted(path.name for path in PACKAGE_ROOT.glob("*.py"))
    # progress.py: the one progress interval that runs (execution/) and the cold start (models/) share
    assert modules == ["__init__.py", "batch.py", "config.py", "errors.py", "progress.py", "registry.py", "safe_io.py"]


def handed_on_names(path: Path, root: Path = PACKAGE_ROOT) -> dict[str, str]:
    """Names ``path`` imports and hands on (listed in ``__all__``, aliased at module level, or
    imported with ``noqa: F401``) -> the module each comes from."""
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    lines = source.splitlines()
    module = module_name(path, root)
    package = package_of(module, path)
    imported: dict[str, str] = {}
    noqa: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            span = " ".join(lines[node.lineno - 1 : node.end_lineno])
            source_module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source_module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                submodule = f"{source_module}.{alias.name}"  # `from . import trl`: the submodule is its home
                is_module = (root.parent / submodule.replace(".", "/")).with_suffix(".py").exists() or (
                    root.parent / submodule.replace(".", "/") / "__init__.py"
                ).exists()
                imported[name] = submodule if isinstance(node, ast.ImportFrom) and is_module else source_module
                if "noqa: F401" in span:
                    noqa.add(name)
    handed = {name: imported[name] for name in noqa}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in imported:
            handed.update(
                {target.id: imported[node.value.id] for target in node.targets if isinstance(target, ast.Name)}
            )
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "__all__" for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            handed.update(
                {
                    elt.value: imported[elt.value]
                    for elt in node.value.elts
                    if isinstance(elt, ast.Constant) and elt.value in imported
                }
            )
    return handed


def names_imported_from(module: str, files: list[Path]) -> set[str]:
    """Every name some file imports with ``from <module> import name`` (or uses as ``<module>.name``)."""
    names: set[str] = set()
    for path in files:
        text = path.read_text()
        if module not in text:
            continue
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == module:
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == module:
                names.add(node.attr)
    return names


def test_handed_on_names_are_found(tmp_path):
    """An alias of an imported name, an ``__all__`` entry that is imported, and a ``noqa: F401`` import
    are handed on; a name defined here, or imported and only used, is not."""
    package = tmp_path / "workbench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "m.py").write_text(
        "from workbench.a import one, two\n"
        "from workbench.b import three  # noqa: F401 - re-exported\n"
        "from .c import four\n"
        "__all__ = ['one', 'own']\n"
        "alias = two\n"
        "own = four()\n"
    )
    assert handed_on_names(package / "m.py", package) == {
        "one": "workbench.a",
        "alias": "workbench.a",
        "three": "workbench.b",
    }


def test_no_re_export_shims():
    """Every name a module hands on is imported from it somewhere (package, tests, benchmarks,
    dashboards); a name nobody takes from there is a shim: import it from its real home."""
    repo = PACKAGE_ROOT.parent
    files = [
        path for folder in ("workbench", "tests", "benchmarks", "dashboards") for path in (repo / folder).rglob("*.py")
    ]
    unused, foreign = [], []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        module = module_name(path, PACKAGE_ROOT)
        handed = handed_on_names(path)
        if path.name == "__init__.py":  # the front door: its own submodules' names only
            foreign += [
                f"{module}.{name} (from {home})"
                for name, home in sorted(handed.items())
                if not home.startswith(module + ".")
            ]
        elif handed:
            taken = names_imported_from(module, files)
            unused += [f"{module}.{name}" for name in sorted(set(handed) - taken)]
    assert not unused, "names handed on that nobody imports from there: " + ", ".join(unused)
    assert not foreign, "a package hands on another package's names: " + ", ".join(foreign)


def test_import_workbench_and_the_cli_stay_light():
    """``import workbench`` and ``import workbench.cli.main`` load no heavy dependency (the notebook
    API's names load theirs on first use, PEP 562); ``from workbench import load_study`` works."""
    import subprocess
    import sys

    heavy = ("scipy", "statsmodels", "torch", "transformers", "plotly", "mlflow")
    code = (
        "import sys, workbench, workbench.cli.main; "
        f"print(','.join(m for m in {heavy!r} if m in sys.modules)); "
        "from workbench import load_study; print(load_study.__module__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE_ROOT.parent
    )
    loaded, home = done.stdout.splitlines()
    assert loaded == "", f"import workbench.cli.main loaded {loaded}"
    assert home == "workbench.notebook.study"
