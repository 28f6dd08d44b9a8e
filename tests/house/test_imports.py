"""The package's import structure, read from the source (AST): no import circles among
mxnet_amp modules, and no private name (``_x``) imported from another module.

What counts as an import: module level and function-local ones alike (a function-local import
defers loading, but the two modules still need each other: a circle in the design).
``if TYPE_CHECKING:`` imports do not count: they never run and name types for annotations
only. Importing a package (``from . import __version__``) is an edge to its ``__init__``.
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "mxnet_amp"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(path: Path, module: str) -> list[tuple[str, str | None, int]]:
    """``(module imported, name or None, line)`` for each runtime import of an mxnet_amp module
    in ``path``, the source of ``module``."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[tuple[str, str | None, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "mxnet_amp":
                found.extend((target, a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend((a.name, None, node.lineno) for a in node.names
                         if a.name.split(".")[0] == "mxnet_amp")
        else:
            visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module -> modules it imports; and each private name imported across modules."""
    paths = sorted(PKG.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for path in paths:
        source = _module_name(path)
        for target, name, line in _imports(path, source):
            # `from .passes import strip_casts` imports a module, not a name
            if name is not None and f"{target}.{name}" in modules:
                target, name = f"{target}.{name}", None
            if target != source:
                edges[source].add(target)
            if name is not None and name.startswith("_") and not name.startswith("__"):
                private.append(f"{source}:{line} imports {name} from {target}")
    return edges, private


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def test_the_finder_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_reader_counts_local_imports_and_not_type_checking_ones(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "from .graph import Graph\n"
                      "from ..convert import _private\n"
                      "if TYPE_CHECKING:\n    from .report import Report\n"
                      "def f():\n    from . import draw\n    import mxnet_amp.io\n")
    found = _imports(source, "mxnet_amp.passes.mod")
    assert found == [("mxnet_amp.passes.graph", "Graph", 2), ("mxnet_amp.convert", "_private", 3),
                     ("mxnet_amp.passes", "draw", 7), ("mxnet_amp.io", None, 8)]


def test_no_import_circles():
    edges, _ = _graph()
    assert _cycles(edges) == []


def test_no_private_names_imported_across_modules():
    _, private = _graph()
    assert private == []
