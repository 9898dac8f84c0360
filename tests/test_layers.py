"""The layers of design §2 are one-directional, and the package has no import cycles.

Every ``import`` statement of every module (top level or inside a function, but not under
``if TYPE_CHECKING:``) is read from the source with ``ast``. A module may import its own layer or a lower
one, never a higher one; and the module graph has no cycle. The checker is run on the real package and,
to show it can fail, on a small package written by the test with a deliberate upward import and a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import autoconf

# Lowest first. The base modules (schema, errors, defaults) are layer 0; the package's own __init__ is a
# façade (version, lazy aliases) and is not a layer.
LAYERS = ("base", "catalog", "estimators", "planning", "recommend", "evaluation", "interfaces")
BASE = {"schema", "errors", "defaults"}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str, package: str) -> int | None:
    """Index in LAYERS of a module of ``package`` (None for the package façade and foreign modules)."""
    parts = module.split(".")
    if parts[0] != package or len(parts) == 1:
        return None
    top = parts[1]
    return 0 if top in BASE else LAYERS.index(top) if top in LAYERS else None


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path, module: str, modules: set[str]) -> set[str]:
    """Modules of the package that ``path`` imports (a ``from X import y`` of a submodule counts as X.y)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
    ancestors = {".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)}
    return {m for m in found if m in modules and m != module and m not in ancestors}  # a parent always runs first


def import_graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(root, p): p for p in root.rglob("*.py")}
    modules = set(files)
    return {m: imports_of(p, m, modules) for m, p in files.items()}


def layer_violations(root: Path) -> list[str]:
    package = root.name
    out = []
    for module, targets in sorted(import_graph(root).items()):
        mine = layer_of(module, package)
        for target in sorted(targets):
            theirs = layer_of(target, package)
            if mine is not None and theirs is not None and theirs > mine:
                out.append(f"{module} ({LAYERS[mine]}) imports {target} ({LAYERS[theirs]})")
    return out


def cycles(root: Path) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


PACKAGE = Path(autoconf.__file__).parent


def test_no_module_imports_a_higher_layer() -> None:
    assert layer_violations(PACKAGE) == []


def test_no_import_cycles() -> None:
    assert cycles(PACKAGE) == []


def test_at_most_ten_top_level_entries() -> None:
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert len(entries) <= 10, entries


def test_every_package_init_says_what_it_is() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 6, f"{init} needs a docstring saying what the package is"


@pytest.fixture()
def bad_package(tmp_path: Path) -> Path:
    """A package shaped like ours with a catalogue module importing the CLI, and a two-module cycle."""
    root = tmp_path / "pkg"
    for folder in ("", "catalog", "interfaces", "interfaces/cli", "estimators"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_text('"""x."""\n')
    (root / "schema.py").write_text("X = 1\n")
    (root / "catalog" / "models.py").write_text("from pkg.interfaces.cli import main\n")
    (root / "interfaces" / "cli" / "main.py").write_text("import pkg.schema\n")
    (root / "estimators" / "a.py").write_text("def f():\n    from pkg.estimators import b\n")
    (root / "estimators" / "b.py").write_text("from pkg.estimators.a import f\n")
    (root / "estimators" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.interfaces.cli import main\n")
    return root


def test_checker_finds_a_deliberate_upward_import(bad_package: Path) -> None:
    assert layer_violations(bad_package) == [
        "pkg.catalog.models (catalog) imports pkg.interfaces.cli (interfaces)",
        "pkg.catalog.models (catalog) imports pkg.interfaces.cli.main (interfaces)",
    ]


def test_checker_finds_a_deliberate_cycle(bad_package: Path) -> None:
    assert cycles(bad_package) == [["pkg.estimators.a", "pkg.estimators.b"]]


def test_ibm_import_paths_are_aliases_into_the_interfaces_layer() -> None:
    """IBM ado-autoconf's top-level names (autoconf.min_gpu_recommender, .throughput_recommender, .model_paths,
    .utils) are served by the alias finder of autoconf/__init__.py from interfaces/ado/ibm: no top-level entry
    of their own, no layer of their own, and one module object under both names."""
    import importlib

    pytest.importorskip("ado")
    for name in autoconf.IBM_MODULES:
        assert not (PACKAGE / name).exists() and not (PACKAGE / f"{name}.py").exists()
        alias = importlib.import_module(f"autoconf.{name}")
        assert alias is importlib.import_module(f"autoconf.interfaces.ado.ibm.{name}")
        assert layer_of(alias.__name__, "autoconf") == LAYERS.index("interfaces")
