"""Move the package's flat modules into rank folders (issue 43, item 4), reproducibly.

    python tools/move_modules.py            # on a clean checkout of the repository root
    python tools/move_modules.py --dry-run  # say what would move, change nothing

Other work changes the same files until the move lands, so the move is this script, not a
commit: it is run again on the then-current tree. In order it

1. splits out the definitions that change module (``SPLITS``: the atomic writes leave
   ``io.py`` for ``files/atomic.py``, ``name_list`` leaves ``options.py`` for
   ``mx/arguments.py``, the atomic-write test leaves ``tests/test_io.py``), their imports
   computed from the names they use;
2. ``git mv``s each module of ``MODULES`` and its mirrored tests
   (``tests/test_<m>.py``, ``tests/test_<m>_<aspect>.py``) into the folders, each folder
   given an ``__init__.py`` (docstring and ``__all__``) and a place in setup.py;
3. rewrites every reference in the repository's Python and Markdown files: imports, read
   from the AST (relative ones re-expressed from each file's new place, a statement split
   where its names now come from two modules), then text: dotted names (``mxnet_amp.io``
   in docstrings, ``-m`` commands, mock targets, code strings), file paths
   (``mxnet_amp/io.py``, ``tests/test_io.py``, a bare ``io.py`` in prose), and the
   ``__file__``-relative roots of the moved tests;
4. writes what is new (``REGIONS``: the rank table of tests/house/test_imports.py, the
   layout section of docs/architecture.md; ``APPENDS``: the tests that ``ir/`` imports no
   MXNet and that the top level holds at most 15 modules) and applies ``EDITS``: exact text
   replacements the rules above cannot derive (each must match, or the script stops and
   says which).

It refuses a dirty tree or a tree where a target exists, and prints every file it changed.
"""
from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

PKG = "mxnet_amp"

# old module (under mxnet_amp) -> new module; a module's tests move with it
MODULES = {
    "graph": "ir.graph", "dtypes": "ir.dtypes", "verify": "ir.verify", "gcpause": "ir.gcpause",
    "atomic": "files.atomic", "paths": "files.paths", "progress": "files.progress",
    "interrupts": "files.interrupts",
    "registry": "mx.registry", "arguments": "mx.arguments", "optypes": "mx.optypes",
    "entries": "mx.entries", "hardware": "mx.hardware", "fused": "mx.fused",
    "params": "mx.params", "io": "mx.io",
    "tuning": "tune.tuning", "tune_cache": "tune.cache", "tune": "tune.timing",
    "weight_range": "passes.weight_range",
}

PACKAGES = {
    "ir": "The graph as plain data: :class:`~mxnet_amp.ir.graph.Graph` and its builders, dtype "
          "names and codes,\nthe invariant checker, the collector pause. Imports no MXNet "
          "(tests/house/test_imports.py\nchecks it): everything above reads and writes this.",
    "files": "Files the package writes and reads: atomic writes, output paths, progress bars, "
             "interrupts.\nNo MXNet: the report and the timing cache write through here.",
    "mx": "The MXNet boundary: the op registry and its type inference, argument checks, a "
          "graph's\nentries, the machine (hardware), fused ops, params and symbol / checkpoint "
          "I/O.",
    "tune": "The timed choice (``tune=``): what it asks for (tuning), the timings per machine "
            "(cache)\nand the kernel timing itself (timing).",
}

_ATOMIC_DOC = '''"""Files written all at once: a temporary file beside the target, renamed over it when
complete, so an interrupted or failed write never leaves a truncated file under the final
name. Streams (standard output, devices, FIFOs) are written through, never replaced."""'''

_ATOMIC_TEST_DOC = '''"""mxnet_amp.files.atomic: files written all at once."""'''

# (source file, destination file, top-level names, renames, docstring of a new destination)
SPLITS = [
    ("mxnet_amp/io.py", "mxnet_amp/atomic.py",
     ["atomic_write", "atomic_writes", "_filled", "_write_refusal", "_check_complete",
      "_write_stream", "_write_all", "_temp_beside", "_text_writer"],
     {"_text_writer": "text_writer"}, _ATOMIC_DOC),
    ("mxnet_amp/options.py", "mxnet_amp/arguments.py", ["name_list"], {}, None),
    ("tests/test_io.py", "tests/test_atomic.py",
     ["test_a_write_killed_by_sigkill_leaves_a_temporary_the_next_write_removes"], {},
     _ATOMIC_TEST_DOC),
]

# dotted names left as they are: documented public spellings the package still answers
# (``mxnet_amp/__init__.py`` binds ``hardware``)
KEEP = ("mxnet_amp.hardware.bf16_runs_natively",)
# dotted names of a re-imported name, sent to its home (the rest follow their module)
DOTTED = {"mxnet_amp.tune.Tuning": "mxnet_amp.tune.tuning.Tuning"}
# ... and in the Markdown pages, every public spelling under these (users were told them)
KEEP_IN_PAGES = ("mxnet_amp.hardware",)

# what the text rules do not reach: (file, old text, new text), applied after them
EDITS: list[tuple[str, str, str]] = [
    ("tests/stories/test_user_facing_21.py",
     "import mxnet_amp.mx.io as io   # atomic_writes looks check_writable up there",
     "import mxnet_amp.files.atomic as atomic   # atomic_writes looks check_writable up there"),
    ("tests/stories/test_user_facing_21.py",
     'monkeypatch.setattr(io, "check_writable"', 'monkeypatch.setattr(atomic, "check_writable"'),
    ("mxnet_amp/files/atomic.py", "def text_writer(text: str) -> Callable[[str], None]:\n",
     "def text_writer(text: str) -> Callable[[str], None]:\n"
     '    """A ``write`` for :func:`atomic_writes` that writes ``text`` (a symbol\'s JSON)."""\n'),
    # ir/ imports no MXNet, not even for the type checker (MXNet has no stubs: NDArray is Any)
    ("mxnet_amp/ir/dtypes.py",
     "from typing import TYPE_CHECKING, Any, Iterable\n\nimport numpy as np\n\n"
     "if TYPE_CHECKING:\n    from mxnet.ndarray import NDArray\n",
     "from typing import Any, Iterable\n\nimport numpy as np\n"),
    ("mxnet_amp/ir/dtypes.py", "def array_dtype(array: NDArray) -> str:",
     "def array_dtype(array: Any) -> str:"),
    ("mxnet_amp/ir/dtypes.py", "def array_nbytes(array: NDArray) -> int:",
     "def array_nbytes(array: Any) -> int:"),
]

# ----------------------------------------------------------------------------- texts

_RANKS_DOC = """The ranks (docs/architecture.md lists the folders), lowest first; a module imports its own
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
\"\"\"
"""

_RANKS_CODE = """# the ranks, lowest first: each top-level folder of the package (with all its modules) or
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
    \"\"\"``(top-level name, rank)`` of ``mxnet_amp.x.y``.\"\"\"
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return top, _RANK[top]


def _upward(edges: dict[str, set[str]]) -> list[str]:
    \"\"\"Each import of a higher rank, or of a sibling among gluon/report/onnx.\"\"\"
    wrong = []
    for source, targets in sorted(edges.items()):
        top, rank = _layer(source)
        for target in sorted(targets):
            other, other_rank = _layer(target)
            if other_rank > rank or (other_rank == rank == _APPS and other != top):
                wrong.append(f"{source} imports {target}")
    return wrong


def test_every_module_has_a_layer():
    \"\"\"Every folder and top-level module has a rank, and every name of the table is one.\"\"\"
    edges, _ = _graph()
    assert [m for m in edges if m != "mxnet_amp" and m.split(".")[1] not in _RANK] == []
    tops = {p.stem for p in PKG.glob("*.py")} | {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert sorted(set(_RANK) - tops - {""}) == []


def test_the_layers_import_downwards_only():
    \"\"\"ir/ imports only its rank (errors, warn), mx/ nothing above files/ and policy, report
    never auto, shape_check never convert, gluon/report/onnx not one another.\"\"\"
    edges, _ = _graph()
    assert _upward(edges) == []


"""

_IR_TESTS = """

def _mxnet_imports(path: Path) -> list[str]:
    \"\"\"``line: module`` of each import of MXNet in ``path``: module level, in functions and
    under TYPE_CHECKING.\"\"\"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [f"{node.lineno}: {n}" for n in names if n.split(".")[0] == "mxnet"]
    return found


def test_ir_imports_no_mxnet():
    \"\"\"ir/ and every package module it imports, however deep, import no MXNet: the graph is
    plain data (issue 43).\"\"\"
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
    source.write_text("import mxnet as mx\\nif TYPE_CHECKING:\\n    from mxnet.ndarray import NDArray\\n"
                      "def f():\\n    import mxnet.symbol\\n    from . import graph\\n    import mxnet_amp\\n")
    assert _mxnet_imports(source) == ["1: mxnet", "3: mxnet.ndarray", "5: mxnet.symbol"]
"""

_LAYOUT_TESTS = """

# issue 43: the top level is a listing of rank folders (ir/, files/, mx/, tune/, ...) and few modules
MAX_TOP_LEVEL = 15


def test_the_top_level_holds_at_most_15_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert "__init__.py" in top and len(top) <= MAX_TOP_LEVEL, top
"""

_LAYOUT_DOC = """## The package layout

Each folder is a rank: a module imports its own rank and those below (the `->` notes), never
above; `tests/house/test_imports.py` holds the table.

```
mxnet_amp/
  __init__.py __main__.py   the public API (re-exports only) and `python -m mxnet_amp`
  errors.py warn.py         the typed errors (AMPError and its kinds) and warnings attributed to
                            the caller's line
  ir/                       the graph as plain data, imports no MXNet: graph (Graph, Node, Entry,
                            the cast nodes), dtypes (names and MXNet's codes), verify (what every
                            pass keeps), gcpause (the collector paused while a big graph is built);
                            -> errors, warn
  files/                    what is written and read: atomic (files written all at once), paths
                            (outputs checked before any work), progress (bars), interrupts (Ctrl-C
                            and SIGTERM unwind); no MXNet; -> ir
  policy.py                 the op policy: categories, decisions and their reasons; -> ir
  mx/                       the MXNet boundary: registry (ops, type inference), arguments (checks of
                            the public arguments), optypes, entries, hardware (the machine), fused
                            (fused ops), params, io (symbol JSON <-> Graph, checkpoints); -> files
  kernels/                  round.cc (the emulation's rounding as MXNet external ops) and build
                            (compiles, caches and loads it); beside mx/
  policy_load.py options.py the op lists read (lists/*.toml); the options of one conversion
  tune/                     the timed choice (`tune=`): tuning (what it asks for), cache (timings
                            per machine), timing (the kernels timed); -> mx
  passes/                   kernel.py (Rewriter, GraphPass, PassResult, run_passes) + one pass per
                            file, weight_range (weights float16 cannot hold); -> the ranks above
  shape_check/              check, guess, cuts, infer, messages: params' shapes against the symbol
                            before any work; -> passes
  convert record pipeline checkpoint bucketing emulation stripped_casts .py
                            pipelines: pipeline.py is the pass list, record.py what a conversion
                            returns, convert.py the public API; files, modules; -> all of the above
  gluon/                    adapter (convert_hybrid_block), block (AMPSymbolBlock), model (a block
                            read as a model); -> pipelines and below
  report/                   model (ConversionReport), tables, pages (text and HTML), picture, layout,
                            draw (SVG/DOT/PNG), op_costs, precision_map and precision_svg (the
                            one-screen map); -> pipelines and below, never auto
  onnx/                     export, exporter, converters, weights, constants, retype, tidy; -> pipelines and below
  auto/                     automatic mode; -> gluon, report, pipelines and below
  cli/                      main (dispatch), parser, checks, auto_command, demo, output; -> everything;
                            nothing imports it but __main__
tests/                      mirrors the package: tests/<folder>/test_<module>.py for every module
                            (tests/house/test_layout.py checks it), plus stories/ (end-to-end user
                            stories), house/ (import order, mypy, AST rules, docs, packaging),
                            support/ (builders and trained models the tests share), upstream/
                            (MXNet's own AMP tests, ported)
```

`ir/` and everything it imports import no MXNet, not even for the type checker
(`tests/house/test_imports.py`), and the top level holds 15 modules at most
(`tests/house/test_layout.py`). The report writes its files through `files/atomic.py`, not
the MXNet boundary. The public spellings stay: `mxnet_amp.hardware.bf16_runs_natively()` (the
package binds `hardware`), `mxnet_amp.save_checkpoint`, `python -m mxnet_amp.auto.worker_process`.

"""

# (file, start pattern, end pattern, replacement): the text from the start match up to the end
# match (excluded) is replaced; both must match once
REGIONS = [
    ("tests/house/test_imports.py", r"^The layers \(docs/architecture\.md draws them\)", r'^from __future__',
     _RANKS_DOC),
    ("tests/house/test_imports.py", r"^_CORE = \(", r"^def test_nothing_imports_cli", _RANKS_CODE),
    ("docs/architecture.md", r"^## The package layout\n", r"^Imports flow downwards only",
     _LAYOUT_DOC),
]
# (file, text appended)
APPENDS = [("tests/house/test_imports.py", _IR_TESTS), ("tests/house/test_layout.py", _LAYOUT_TESTS)]


TEXT_SUFFIXES = (".py", ".md", ".ini")
SKIP = ("tools/move_modules.py", "benchmarks/results/")
LINE = 110


# ----------------------------------------------------------------------------- names

def new_module(old: str) -> str:
    """``mxnet_amp.io`` -> ``mxnet_amp.mx.io``; a name no move touches stays."""
    parts = old.split(".")
    if len(parts) >= 2 and parts[0] == PKG and parts[1] in MODULES:
        return ".".join([PKG, *MODULES[parts[1]].split("."), *parts[2:]])
    return old


def symbol_moves() -> dict[tuple[str, str], tuple[str, str]]:
    """``(old module, name) -> (old module, new name)`` of each definition ``SPLITS`` moves."""
    moves = {}
    for src, dst, names, renames, _ in SPLITS:
        if src.startswith(PKG + "/"):
            for name in names:
                moves[(_dotted(src), name)] = (_dotted(dst), renames.get(name, name))
    return moves


def _dotted(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _path_of(module: str, package: bool = False) -> str:
    return module.replace(".", "/") + ("/__init__.py" if package else ".py")


# ----------------------------------------------------------------------------- splits

def _top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        found[n.id] = node
    return found


def _bindings(tree: ast.Module, module: str, is_init: bool) -> dict[str, tuple[str, str | None, str | None]]:
    """Name bound by a top-level import -> ``(absolute module, imported name or None, asname)``;
    imports under ``if TYPE_CHECKING:`` are marked by a module prefixed with ``?``."""
    found: dict[str, tuple[str, str | None, str | None]] = {}

    def visit(body: list[ast.stmt], checking: bool) -> None:
        for node in body:
            mark = "?" if checking else ""
            if isinstance(node, ast.ImportFrom):
                target = _absolute(node, module, is_init)
                for a in node.names:
                    found[a.asname or a.name] = (mark + target, a.name, a.asname)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    found[a.asname or a.name.split(".")[0]] = (mark + a.name, None, a.asname)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.body, True)
    visit(tree.body, False)
    return found


def _absolute(node: ast.ImportFrom, module: str, is_init: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_init else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _used_names(nodes: list[ast.stmt]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _segment(lines: list[str], node: ast.stmt) -> tuple[int, int]:
    """0-based ``[start, end)`` lines of a definition, its decorators and the comment block
    right above it."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return start, node.end_lineno


def _spelled(target: str, here: str) -> str:
    """``target`` as module ``here`` imports it: relative inside the package."""
    if target.split(".")[0] == PKG and here.split(".")[0] == PKG:
        return relative(target, here, False)
    return target


def _import_line(target: str, names: list[str], here: str, is_init: bool) -> str:
    return wrap(f"from {_spelled(target, here)} import ", names, "")


def relative(target: str, here: str, is_init: bool) -> str:
    """``target`` as a relative module name seen from module ``here``."""
    package = here.split(".") if is_init else here.split(".")[:-1]
    parts = target.split(".")
    common = 0
    while common < min(len(package), len(parts)) and package[common] == parts[common]:
        common += 1
    return "." * (len(package) - common + 1) + ".".join(parts[common:])


def wrap(head: str, names: list[str], indent: str, paren: bool = True) -> str:
    """``head`` and ``names`` on one line, or wrapped at ``LINE`` columns (``indent`` is the
    statement's own, which the caller adds to the continuation lines): in parentheses for an
    import, bare for a list whose bracket ``head`` opens."""
    line = head + ", ".join(names)
    if len(indent + line) <= LINE:
        return line
    first = head + ("(" if paren else "")
    pad = " " * len(first)
    rows, current = [], first
    for i, name in enumerate(names):
        piece = name + (", " if i < len(names) - 1 else (")" if paren else ""))
        if current.strip() != first.strip() and len(indent + current + piece.rstrip()) > LINE:
            rows.append(current.rstrip())
            current = pad
        current += piece
    rows.append(current)
    return "\n".join(rows)


def split_out(root: Path, src: str, dst: str, names: list[str], renames: dict[str, str],
              doc: str | None) -> None:
    """Move the top-level definitions ``names`` of ``src`` to ``dst`` (created with ``doc``
    when new), with the imports they need; ``src`` imports back what it still uses."""
    text = (root / src).read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    here, there = _dotted(src), _dotted(dst)
    defs = _top_level(tree)
    missing = [n for n in names if n not in defs]
    if missing:
        raise SystemExit(f"{src}: no top-level definition of {missing}")
    nodes = sorted({id(defs[n]): defs[n] for n in names}.values(), key=lambda n: n.lineno)
    spans = [_segment(lines, n) for n in nodes]
    moved_text = "\n\n".join("".join(lines[a:b]).rstrip("\n") + "\n" for a, b in spans)
    for old, new in renames.items():
        moved_text = re.sub(rf"\b{re.escape(old)}\b", new, moved_text)
    bound = _bindings(tree, here, src.endswith("__init__.py"))
    used = _used_names(nodes)
    local = {n for n in defs if n not in names and n != "__all__"}
    stray = sorted(used & local)
    if stray:
        raise SystemExit(f"{src}: the moved code uses {stray}, defined there and not moved: "
                         f"add them to SPLITS")
    needed: dict[str, list[str]] = {}
    plain: list[str] = []
    for name in sorted(used & set(bound)):
        module, imported, asname = bound[name]
        if module.startswith("?"):
            raise SystemExit(f"{src}: the moved code uses {name}, imported for type checking only")
        if imported is None:
            plain.append(f"import {module}" + (f" as {asname}" if asname else ""))
        else:
            needed.setdefault(module, []).append(imported + (f" as {asname}" if asname else ""))
    keep_lines = [i for i in range(len(lines)) if not any(a <= i < b for a, b in spans)]
    rest = "".join(lines[i] for i in keep_lines)
    for old, new in renames.items():
        rest = re.sub(rf"\b{re.escape(old)}\b", new, rest)
    rest_tree = ast.parse(rest)
    still = {n.id for n in ast.walk(rest_tree) if isinstance(n, ast.Name)}
    back = sorted(renames.get(n, n) for n in names if renames.get(n, n) in still)
    private_back = [n for n in back if n.startswith("_")]
    if private_back:
        raise SystemExit(f"{src} still uses {private_back} after the split: rename them in SPLITS")
    rest = _drop_unused_imports(rest, used - still, here, src.endswith("__init__.py"))
    rest = _drop_from_all(rest, names)
    if back:
        rest = _add_from(rest, _spelled(there, here), back)
    (root / src).write_text(re.sub(r"\n{4,}", "\n\n\n", rest).rstrip("\n") + "\n", encoding="utf-8")
    public = [renames.get(n, n) for n in names if not renames.get(n, n).startswith("_")
              and not renames.get(n, n).startswith("test_")]
    target = root / dst
    if target.exists():
        body = target.read_text(encoding="utf-8")
        have = _bindings(ast.parse(body), there, False)
        for module, imported in sorted(needed.items()):
            new = [n for n in imported if n.split(" as ")[-1] not in have]
            if new:
                body = _add_from(body, _spelled(module, there), new)
        for line in plain:
            if line.split()[-1] not in have:
                body = _add_plain(body, line)
        body = _add_to_all(body, public)
        target.write_text(body.rstrip("\n") + "\n\n\n" + moved_text, encoding="utf-8")
        return
    std = sorted(plain) + sorted(_import_line(m, i, there, False) for m, i in needed.items()
                                 if m.split(".")[0] != PKG)
    ours = sorted(_import_line(m, i, there, False) for m, i in needed.items() if m.split(".")[0] == PKG)
    head = [doc, "from __future__ import annotations", ""]
    if std:
        head += std + [""]
    if ours:
        head += ours + [""]
    if public:
        head += [wrap("__all__ = [", [f'"{n}"' for n in public], "", False) + "]", ""]
    target.write_text("\n".join(head).rstrip("\n") + "\n\n\n" + moved_text, encoding="utf-8")


def _drop_unused_imports(text: str, candidates: set[str], module: str, is_init: bool) -> str:
    """Remove the names in ``candidates`` from the top-level imports that bind them."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or isinstance(node, ast.ImportFrom) \
                and node.module == "__future__":
            continue
        names = [a for a in node.names if (a.asname or a.name.split(".")[0]) in candidates]
        if not names:
            continue
        left = [a for a in node.names if a not in names]
        if not left:
            new = ""
        elif isinstance(node, ast.ImportFrom):
            head = f"from {'.' * node.level}{node.module or ''} import "
            new = wrap(head, [a.name + (f" as {a.asname}" if a.asname else "") for a in left], "") + "\n"
        else:
            new = "import " + ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in left) + "\n"
        edits.append((node.lineno - 1, node.end_lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new] if new else []
    return "".join(lines)


def _drop_from_all(text: str, names: list[str]) -> str:
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            keep = [e.value for e in node.value.elts if isinstance(e, ast.Constant)  # type: ignore[attr-defined]
                    and e.value not in names]
            lines = text.splitlines(keepends=True)
            new = wrap("__all__ = [", [f'"{n}"' for n in keep], "", False) + "]\n"
            lines[node.lineno - 1:node.end_lineno] = [new]
            return "".join(lines)
    return text


def _add_to_all(text: str, names: list[str]) -> str:
    if not names:
        return text
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            have = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]  # type: ignore[attr-defined]
            lines = text.splitlines(keepends=True)
            new = wrap("__all__ = [", [f'"{n}"' for n in have + [x for x in names if x not in have]], "", False) + "]\n"
            lines[node.lineno - 1:node.end_lineno] = [new]
            return "".join(lines)
    raise SystemExit("a destination without __all__")


def _add_from(text: str, module: str, names: list[str]) -> str:
    """``from <module> import names`` (``module`` as spelled in this file): added to the
    top-level import of that module when there is one, else a line after the last top-level
    import (outside ``if TYPE_CHECKING:``)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and "." * node.level + (node.module or "") == module:
            have = [_alias_text(a.name, a.asname) for a in node.names]
            line = wrap(f"from {module} import ", sorted(set(have) | set(names), key=str.lower), "")
            lines[node.lineno - 1:node.end_lineno] = [line + "\n"]
            return "".join(lines)
    last = max((n.end_lineno or 0 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))),
               default=0)
    lines[last:last] = [wrap(f"from {module} import ", names, "") + "\n"]
    return "".join(lines)


def _add_plain(text: str, line: str) -> str:
    tree = ast.parse(text)
    last = max((n.end_lineno or 0 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))),
               default=0)
    lines = text.splitlines(keepends=True)
    lines[last:last] = [line + "\n"]
    return "".join(lines)


# ----------------------------------------------------------------------------- imports

def _alias_text(name: str, asname: str | None) -> str:
    return name + (f" as {asname}" if asname else "")


def rewrite_from(target: str, aliases: list[tuple[str, str | None]],
                 symbols: dict[tuple[str, str], tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """Where each name of ``from <target> import <aliases>`` (old names) comes from now:
    ``[(new module, [alias text])]`` in first-seen order."""
    groups: dict[str, list[str]] = {}
    for name, asname in aliases:
        full = f"{target}.{name}"
        if name != "*" and new_module(full) != full and target == PKG:
            module, new = new_module(full).rsplit(".", 1)
            text = _alias_text(new, asname or (name if new != name else None))
        elif (target, name) in symbols:
            moved, new = symbols[(target, name)]
            module = new_module(moved)
            text = _alias_text(new, asname or (name if new != name else None))
        else:
            module, text = new_module(target), _alias_text(name, asname)
        groups.setdefault(module, []).append(text)
    return list(groups.items())


def rewrite_python(text: str, old_module: str | None, new_module_name: str | None, is_init: bool,
                   symbols: dict[tuple[str, str], tuple[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The file's import statements rewritten; returns the text and the (line, col) spans of
    its import statements (which the text rules then leave alone)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        spans.append((start, end))
        old = text[start:end]
        new = _rewrite_statement(node, old, lines[node.lineno - 1][:node.col_offset], old_module,
                                 new_module_name, is_init, symbols)
        if new != old:
            edits.append((start, end, new))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text, import_spans(text)   # the spans moved with the edits


def import_spans(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` character offsets of every import statement of ``text``."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    return [(offsets[n.lineno - 1] + n.col_offset, offsets[(n.end_lineno or n.lineno) - 1] + (n.end_col_offset or 0))
            for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _rewrite_statement(node: ast.Import | ast.ImportFrom, old: str, prefix: str, old_module: str | None,
                       here: str | None, is_init: bool,
                       symbols: dict[tuple[str, str], tuple[str, str]]) -> str:
    if isinstance(node, ast.Import):
        if all(new_module(a.name) == a.name for a in node.names):
            return old
        return "import " + ", ".join(_alias_text(new_module(a.name), a.asname) for a in node.names)
    if node.level and old_module is None:
        return old   # a relative import outside the package: not ours
    if node.level:
        target = _absolute(node, old_module, is_init)   # type: ignore[arg-type]
    else:
        target = node.module or ""
    if target.split(".")[0] != PKG and not node.level:
        return old
    groups = rewrite_from(target, [(a.name, a.asname) for a in node.names], symbols)

    def spelled(module: str) -> str:
        if node.level:
            return relative(module, here, is_init)   # type: ignore[arg-type]
        return module

    original = [_alias_text(a.name, a.asname) for a in node.names]
    if len(groups) == 1 and groups[0][1] == original:
        module = spelled(groups[0][0])
        head = re.match(r"from\s+(\S+)\s+import", old)
        assert head is not None, old
        if head.group(1) == module:
            return old
        return _realign(old[:head.start(1)] + module + old[head.end(1):], len(module) - len(head.group(1)))
    joiner = "\n" + prefix if not prefix.strip() else "; "
    indent = prefix if not prefix.strip() else ""
    return joiner.join(wrap(f"from {spelled(m)} import ", names, indent).replace("\n", "\n" + indent)
                       for m, names in groups)


def _realign(statement: str, delta: int) -> str:
    """A wrapped statement's continuation lines kept under its opening parenthesis after the
    module name before it grew or shrank by ``delta`` characters."""
    first, *rest = statement.split("\n")
    if not rest or "(" not in first:
        return statement
    moved = []
    for line in rest:
        if delta > 0:
            moved.append(" " * delta + line)
        else:
            spaces = len(line) - len(line.lstrip(" "))
            moved.append(line[min(spaces, -delta):])
    return "\n".join([first, *moved])


def tidy_imports(text: str) -> str:
    """Each run of adjacent top-level imports of package modules (relative, or absolute
    ``mxnet_amp.``) sorted by module, deepest relative level first, two imports of one
    module merged: the order a reader expects after names changed under them."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    runs: list[list[ast.ImportFrom]] = []
    previous = None
    for node in tree.body:
        ours = isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == PKG)
        if ours and previous is not None and node.lineno == (previous.end_lineno or 0) + 1:
            runs[-1].append(node)   # type: ignore[arg-type]
        elif ours:
            runs.append([node])   # type: ignore[list-item]
        previous = node if ours else None
    for run in reversed(runs):
        merged: dict[tuple[int, str], list[ast.ImportFrom]] = {}
        for node in run:
            merged.setdefault((node.level, node.module or ""), []).append(node)
        keys = sorted(merged, key=lambda k: (-k[0], k[1].lower()))
        if keys == [(n.level, n.module or "") for n in run]:
            continue
        out = []
        for key in keys:
            nodes = merged[key]
            if len(nodes) == 1:
                out.append("".join(lines[nodes[0].lineno - 1:nodes[0].end_lineno]))
                continue
            names = []
            for node in nodes:
                names += [_alias_text(a.name, a.asname) for a in node.names
                          if _alias_text(a.name, a.asname) not in names]
            head = f"from {'.' * key[0]}{key[1]} import "
            out.append(wrap(head, sorted(names, key=str.lower), "") + "\n")
        lines[run[0].lineno - 1:run[-1].end_lineno] = out
    return "".join(lines)


# ----------------------------------------------------------------------------- text rules

def text_rules(moved_tests: dict[str, str]) -> tuple[re.Pattern[str], dict[str, str]]:
    """One pattern of every dotted name and path that moves, and what each match becomes."""
    table: dict[str, str] = {}
    for keep in KEEP:
        table[keep] = keep
    table.update(DOTTED)
    for (module, name), (moved, new) in symbol_moves().items():
        table[f"{module}.{name}"] = f"{new_module(moved)}.{new}"
    for old in MODULES:
        table[f"{PKG}.{old}"] = new_module(f"{PKG}.{old}")
    dotted = sorted(table, key=len, reverse=True)
    paths: dict[str, str] = {}
    for old, new in MODULES.items():
        paths[f"{PKG}/{old}.py"] = f"{PKG}/{new.replace('.', '/')}.py"
    for old, new in moved_tests.items():
        paths[old] = new
    bare = {f"{old}.py": f"{new.replace('.', '/')}.py" for old, new in MODULES.items()
            if "." in new and old != "atomic"}
    parts = [r"(?P<from>from (?P<fmod>mxnet_amp(?:\.\w+)*) import (?P<fnames>\w+(?: as \w+)?(?:, *\w+(?: as \w+)?)*))",
             r"(?<![\w.])(?P<dot>" + "|".join(re.escape(d) for d in dotted) + r")(?![\w])",
             r"(?<![\w.-])(?<!\w/)(?P<path>" + "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
             + r")(?![\w])",
             r"(?<![\w./-])(?P<bare>" + "|".join(re.escape(b) for b in sorted(bare, key=len, reverse=True))
             + r")(?![\w])"]
    return re.compile("|".join(parts)), {**table, **paths, **bare}


def apply_text_rules(text: str, pattern: re.Pattern[str], table: dict[str, str],
                     skip: list[tuple[int, int]], symbols: dict[tuple[str, str], tuple[str, str]],
                     page: bool = False) -> str:
    """Every match of ``pattern`` outside ``skip`` replaced (a path under another folder, such
    as a profile's ``/work/x/mxnet_amp/io.py``, is a record and stays); in a ``page``, the
    public spellings of ``KEEP_IN_PAGES`` stay."""
    out, last = [], 0
    skip = sorted(skip)

    def inside(pos: int) -> bool:
        return any(a <= pos < b for a, b in skip)

    for m in pattern.finditer(text):
        if inside(m.start()):
            continue
        if m.group("from"):
            aliases = []
            for piece in m.group("fnames").split(","):
                bits = piece.split(" as ")
                aliases.append((bits[0].strip(), bits[1].strip() if len(bits) > 1 else None))
            groups = rewrite_from(m.group("fmod"), aliases, symbols)
            new = "; ".join(f"from {mod} import {', '.join(names)}" for mod, names in groups)
        elif page and m.group("dot") and m.group(0).startswith(KEEP_IN_PAGES):
            new = m.group(0)
        else:
            new = table[m.group(0)]
        out.append(text[last:m.start()])
        out.append(new)
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def package_aliases(text: str) -> list[str]:
    """The names ``import mxnet_amp as <name>`` binds in a file."""
    return sorted({a.asname for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import)
                   for a in n.names if a.name == PKG and a.asname})


def rewrite_aliases(text: str, aliases: list[str], skip: list[tuple[int, int]]) -> str:
    """``amp.io.x`` after ``import mxnet_amp as amp``: the module by its new path."""
    if not aliases:
        return text
    olds = sorted(MODULES, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, aliases)) + r")\.("
                         + "|".join(map(re.escape, olds)) + r")(?![\w])")

    def new(m: re.Match[str]) -> str:
        if any(a <= m.start() < b for a, b in skip):
            return m.group(0)
        return f"{m.group(1)}.{MODULES[m.group(2)]}"
    return pattern.sub(new, text)


_ROOTS = [
    (re.compile(r"os\.path\.dirname\(os\.path\.dirname\(os\.path\.abspath\(__file__\)\)\)"),
     "os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))"),
    (re.compile(r"Path\(__file__\)\.resolve\(\)\.parent\.parent\b"), "Path(__file__).resolve().parents[2]"),
]


def deeper_roots(text: str) -> str:
    """A test moved one folder down finds the repository one more level up."""
    for pattern, new in _ROOTS:
        text = pattern.sub(new, text)
    return re.sub(r"(Path\(__file__\)\.resolve\(\)\.parents)\[(\d)\]",
                  lambda m: f"{m.group(1)}[{int(m.group(2)) + 1}]", text)


# ----------------------------------------------------------------------------- the move

def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def test_moves(root: Path) -> dict[str, str]:
    """``tests/test_<m>[_<aspect>].py`` -> its place beside the moved module's mirror (the
    longest module name wins: test_tune_cache.py is tune_cache's)."""
    moves = {}
    names = sorted(MODULES, key=len, reverse=True)
    for path in sorted((root / "tests").glob("test_*.py")):
        stem = path.stem[len("test_"):]
        owner = next((n for n in names if stem == n or stem.startswith(n + "_")), None)
        if owner is None:
            continue
        new = MODULES[owner].split(".")
        aspect = stem[len(owner):]
        moves[f"tests/{path.name}"] = f"tests/{'/'.join(new[:-1])}/test_{new[-1]}{aspect}.py"
    return moves


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=".")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--check", action="store_true",
                        help="after the move: list the package imports and dotted names that do not resolve")
    args = parser.parse_args()
    root = Path(args.root).resolve()
    if args.check:
        wrong = check(root)
        print("\n".join(wrong) or "every package import and dotted name resolves")
        return 1 if wrong else 0
    if git(root, "status", "--porcelain", "--untracked-files=no").strip() and not args.dry_run:
        raise SystemExit("the tree has uncommitted changes: commit or stash them first")
    missing = [o for o in MODULES if o != "atomic" and not (root / PKG / f"{o}.py").exists()]
    taken = [n for n in PACKAGES if (root / PKG / n / "__init__.py").exists()]
    if missing or taken:
        raise SystemExit(f"not the tree this move is for: missing {missing}, already there {taken}")
    if args.dry_run:
        for old, new in MODULES.items():
            print(f"{PKG}/{old}.py -> {_path_of(PKG + '.' + new)}")
        for old, new in test_moves(root).items():
            print(f"{old} -> {new}")
        return
    symbols = symbol_moves()
    for src, dst, names, renames, doc in SPLITS:
        split_out(root, src, dst, names, renames, doc)
        git(root, "add", dst)
    tests = test_moves(root)
    old_of: dict[str, str] = {}   # new path -> old module name (package files)
    for name in PACKAGES:
        (root / PKG / name).mkdir(exist_ok=True)
    for old, new in MODULES.items():
        src, dst = f"{PKG}/{old}.py", _path_of(f"{PKG}.{new}")
        git(root, "mv", src, dst)
        old_of[dst] = f"{PKG}.{old}"
    for old, new in tests.items():
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        git(root, "mv", old, new)
    for name, doc in PACKAGES.items():
        init = root / PKG / name / "__init__.py"
        init.write_text(f'"""{doc}"""\nfrom __future__ import annotations\n\n__all__: list[str] = []\n',
                        encoding="utf-8")
        git(root, "add", str(init.relative_to(root)))
    pattern, table = text_rules(tests)
    changed = []
    for rel in git(root, "ls-files").splitlines():
        if not rel.endswith(TEXT_SUFFIXES) or rel.startswith(SKIP) or not (root / rel).exists():
            continue
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new = text
        spans: list[tuple[int, int]] = []
        if rel.endswith(".py"):
            if rel.startswith(PKG + "/"):
                old_module = old_of.get(rel, _dotted(rel))
                new, spans = rewrite_python(new, old_module, _dotted(rel), rel.endswith("__init__.py"), symbols)
            else:
                new, spans = rewrite_python(new, None, None, False, symbols)
        new = apply_text_rules(new, pattern, table, spans, symbols, rel.endswith(".md"))
        if rel.endswith(".py"):
            new = rewrite_aliases(new, package_aliases(new), import_spans(new))
        if rel in tests.values():
            new = deeper_roots(new)
        if rel.endswith(".py") and new != text:
            new = tidy_imports(new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel)
    _setup_packages(root)
    for rel, start, end, replacement in REGIONS:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        a = list(re.finditer(start, text, re.M))
        b = [m for m in re.finditer(end, text, re.M) if a and m.start() > a[0].start()]
        if len(a) != 1 or not b:
            raise SystemExit(f"REGIONS: {rel}: {start!r} .. {end!r} not found once")
        print(f"replaced in {rel}:\n" + text[a[0].start():b[0].start()])
        path.write_text(text[:a[0].start()] + replacement + text[b[0].start():], encoding="utf-8")
    for rel, extra in APPENDS:
        path = root / rel
        path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + "\n" + extra, encoding="utf-8")
    for rel, old, new in EDITS:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        if old not in text:
            raise SystemExit(f"EDITS: {rel} holds no {old!r}")
        path.write_text(text.replace(old, new), encoding="utf-8")
    print("\n".join(f"rewrote {c}" for c in changed))
    print(f"moved {len(MODULES)} modules and {len(tests)} test files; rewrote {len(changed)} files")
    return 0


def check(root: Path) -> list[str]:
    """Each package import (AST, anywhere in a Python file) and each dotted ``mxnet_amp.x.y``
    name (any text file) of the tree that does not resolve: what a missed rewrite leaves."""
    import importlib
    sys.path.insert(0, str(root))
    wrong = []

    def resolves(dotted: str) -> bool:
        if dotted.startswith(PKG + ".__main__"):
            return (root / PKG / "__main__.py").exists()   # importing it runs the command line
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for name in parts[cut:]:
                if not hasattr(obj, name):
                    return False
                obj = getattr(obj, name)
            return True
        return False

    dotted = re.compile(r"(?<![\w./-])mxnet_amp(?:\.\w+)+")
    for rel in git(root, "ls-files").splitlines():
        if not rel.endswith(TEXT_SUFFIXES) or rel.startswith(SKIP) or not (root / rel).exists():
            continue
        text = (root / rel).read_text(encoding="utf-8")
        names: set[str] = set()
        if rel.endswith(".py") and not rel.startswith(PKG + "/"):
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(PKG):
                    names |= {f"{node.module}.{a.name}" for a in node.names if a.name != "*"}
                elif isinstance(node, ast.Import):
                    names |= {a.name for a in node.names if a.name.startswith(PKG + ".")}
        names |= {m.group(0).rstrip(".") for m in dotted.finditer(text)}
        wrong += [f"{rel}: {n}" for n in sorted(names) if not resolves(n)]
    return wrong


def _setup_packages(root: Path) -> None:
    """setup.py's ``packages`` gains the new folders."""
    path = root / "setup.py"
    text = path.read_text(encoding="utf-8")
    match = re.search(r"packages=\[(.*?)\]", text, re.S)
    if match is None:
        raise SystemExit("setup.py: no packages=[...] list")
    have = [p.strip().strip('"') for p in match.group(1).replace("\n", " ").split(",") if p.strip()]
    every = sorted(set(have) | {f"{PKG}.{n}" for n in PACKAGES})
    listed = wrap("packages=[", [f'"{p}"' for p in every], "    ", False).replace("\n", "\n    ")
    text = text[:match.start()] + listed + "]" + text[match.end():]
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
