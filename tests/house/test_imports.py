"""The package's import structure, read from the source (AST): the layers import downwards
only, there are no import circles among mxnet_amp modules, and no private name (``_x``) is
imported from another module.

What counts as an import: module level, function-local and ``if TYPE_CHECKING:`` ones alike
(a function-local import defers loading and a type-only one never runs, but either way the two
modules need each other: a circle in the design). Importing a package
(``from . import __version__``) is an edge to its ``__init__``.

The ranks (docs/architecture.md lists the folders), lowest first; a module imports its own
rank and those below, a folder or module of the package being one name of the table:

- ir/ (the graph as plain data: no MXNet, checked here), errors, warn
- files/ (atomic writes, paths, progress, interrupts: no MXNet either), policy
- mx/: the MXNet boundary (registry, arguments, optypes, entries, hardware, fused, params, io),
  and kernels/ (the compiled rounding ops)
- policy_load, options, tune/ (the lists read, the options of a conversion, the timed choice)
- passes/ (one pass per file on passes/kernel.py), then shape_check/
- pipelines: convert, record, pipeline, checkpoint, bucketing, emulation, stripped_casts
- gluon/, report/ and onnx/ (none imports another of the three)
- auto/, then cli/ and the package's ``__init__`` (nothing imports cli but ``__main__``)
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "mxnet_amp"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> list[tuple[str, str | None, int]]:
    """``(module imported, name or None, line)`` for each import of an mxnet_amp module in
    ``path``, the source of ``module``: module level, in functions and under TYPE_CHECKING."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[tuple[str, str | None, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
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


def test_the_reader_counts_local_and_type_checking_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "from .graph import Graph\n"
                      "from ..convert import _private\n"
                      "if TYPE_CHECKING:\n    from .report import Report\n"
                      "def f():\n    from . import draw\n    import mxnet_amp.mx.io\n")
    found = _imports(source, "mxnet_amp.passes.mod")
    assert found == [("mxnet_amp.passes.graph", "Graph", 2), ("mxnet_amp.convert", "_private", 3),
                     ("mxnet_amp.passes.report", "Report", 5), ("mxnet_amp.passes", "draw", 7),
                     ("mxnet_amp.mx.io", None, 8)]


def test_no_import_circles():
    edges, _ = _graph()
    assert _cycles(edges) == []


def test_no_private_names_imported_across_modules():
    _, private = _graph()
    assert private == []


# the ranks, lowest first: each top-level folder of the package (with all its modules) or
# top-level module; a module may import its own rank and those below, and the folders of the
# applications' rank (gluon, report, onnx) not one another. "" is the package's __init__
# (public re-exports and ``__version__``, which cli reads).
_RANKS = (
    ("ir", "errors", "warn"),
    ("files", "policy"),
    ("mx", "kernels"),
    ("policy_load", "options", "tune"),
    ("passes",),
    ("shape_check",),
    ("convert", "record", "pipeline", "checkpoint", "bucketing", "emulation", "stripped_casts"),
    ("gluon", "report", "onnx"),
    ("auto",),
    ("cli", ""),
    ("__main__",),
)
_RANK = {name: rank for rank, names in enumerate(_RANKS) for name in names}
_APPS = _RANK["gluon"]


def _layer(module: str) -> tuple[str, int]:
    """``(top-level name, rank)`` of ``mxnet_amp.x.y``."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return top, _RANK[top]


def _upward(edges: dict[str, set[str]]) -> list[str]:
    """Each import of a higher rank, or of a sibling among gluon/report/onnx."""
    wrong = []
    for source, targets in sorted(edges.items()):
        top, rank = _layer(source)
        for target in sorted(targets):
            other, other_rank = _layer(target)
            if other_rank > rank or (other_rank == rank == _APPS and other != top):
                wrong.append(f"{source} imports {target}")
    return wrong


def test_every_module_has_a_layer():
    """Every folder and top-level module has a rank, and every name of the table is one."""
    edges, _ = _graph()
    assert [m for m in edges if m != "mxnet_amp" and m.split(".")[1] not in _RANK] == []
    tops = {p.stem for p in PKG.glob("*.py")} | {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert sorted(set(_RANK) - tops - {""}) == []


def test_the_layers_import_downwards_only():
    """ir/ imports only its rank (errors, warn), mx/ nothing above files/ and policy, report
    never auto, shape_check never convert, gluon/report/onnx not one another."""
    edges, _ = _graph()
    assert _upward(edges) == []


def test_nothing_imports_cli_and_report_shape_check_keep_their_bounds():
    edges, _ = _graph()
    def imports(prefix: str, target: str) -> list[str]:
        return sorted(f"{s} -> {t}" for s, ts in edges.items() if s.startswith(prefix) for t in ts
                      if t == target or t.startswith(target + "."))
    assert imports("mxnet_amp.report", "mxnet_amp.auto") == []
    assert imports("mxnet_amp.shape_check", "mxnet_amp.convert") == []
    assert [f"{s} -> {t}" for s, ts in edges.items() for t in ts
            if t.startswith("mxnet_amp.cli") and not s.startswith(("mxnet_amp.cli", "mxnet_amp.__main__"))] == []


def test_the_layer_check_sees_an_upward_import():
    assert _upward({"mxnet_amp.ir.graph": {"mxnet_amp.convert"}}) == ["mxnet_amp.ir.graph imports mxnet_amp.convert"]
    assert _upward({"mxnet_amp.report.pages": {"mxnet_amp.auto.html"}}) != []
    assert _upward({"mxnet_amp.report.pages": {"mxnet_amp.gluon.model"}}) != []
    assert _upward({"mxnet_amp.auto.html": {"mxnet_amp.report.tables"}}) == []


def _public_names() -> dict[str, tuple[set[str], list[str]]]:
    """Module -> (names it defines at module level, names its ``__all__`` lists)."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined: set[str] = set()
        listed: list[str] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                defined |= names
                if "__all__" in names and isinstance(node.value, (ast.List, ast.Tuple)):
                    listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        found[_module_name(path)] = (defined, listed)
    return found


def test_each_public_name_has_one_home():
    """A module's ``__all__`` lists only what it defines: no re-exports (a package's
    ``__init__`` is its public face and may list its modules' names)."""
    names = _public_names()
    packages = {_module_name(p) for p in PKG.rglob("__init__.py")}
    reexports = [f"{m}: {n}" for m, (defined, listed) in names.items() if m not in packages
                 for n in listed if n not in defined]
    assert reexports == []


def _mxnet_imports(path: Path) -> list[str]:
    """``line: module`` of each import of MXNet in ``path``: module level, in functions and
    under TYPE_CHECKING."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [f"{node.lineno}: {n}" for n in names if n.split(".")[0] == "mxnet"]
    return found


def test_ir_imports_no_mxnet():
    """ir/ and every package module it imports, however deep, import no MXNet: the graph is
    plain data (issue 43)."""
    edges, _ = _graph()
    seen = {m for m in edges if m == "mxnet_amp.ir" or m.startswith("mxnet_amp.ir.")}
    todo = sorted(seen)
    while todo:
        for target in edges[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert "mxnet_amp.ir.graph" in seen and "mxnet_amp.errors" in seen
    paths = {_module_name(p): p for p in PKG.rglob("*.py")}
    assert [f"{m}:{line}" for m in sorted(seen) for line in _mxnet_imports(paths[m])] == []


def test_the_mxnet_check_sees_every_kind_of_import(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("import mxnet as mx\nif TYPE_CHECKING:\n    from mxnet.ndarray import NDArray\n"
                      "def f():\n    import mxnet.symbol\n    from . import graph\n    import mxnet_amp\n")
    assert _mxnet_imports(source) == ["1: mxnet", "3: mxnet.ndarray", "5: mxnet.symbol"]
