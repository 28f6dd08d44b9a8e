"""The only channel between passes is the pass result (issue 43), read from the source.

A pass (a subclass of ``GraphPass``, anywhere in the package) receives what it needs from
the result of the pass before it (``call_after``) or as plain values when it is built,
never from another pass object: it takes no pass as a constructor argument, reads no
``decided`` off an attribute, writes its own attributes only in ``__init__`` (what it
decides goes in its result), and never mutates a container it was given (a dict another
pass or the caller also holds).
"""
from __future__ import annotations

import ast
from pathlib import Path

import mxnet_amp

PACKAGE = Path(mxnet_amp.__file__).resolve().parent
_MUTATORS = frozenset({"update", "pop", "popitem", "setdefault", "clear", "append", "extend",
                       "insert", "remove", "add", "discard"})


def _base_names(cls: ast.ClassDef) -> set[str]:
    names = set()
    for base in cls.bases:
        node = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def pass_classes(package: Path) -> list[tuple[Path, ast.ClassDef]]:
    """Every class of ``package`` that derives from ``GraphPass`` (by name, transitively)."""
    classes = [(path, node) for path in sorted(package.rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef)]
    passes = {"GraphPass"}
    while True:
        more = {c.name for _, c in classes if _base_names(c) & passes} - passes
        if not more:
            return [(p, c) for p, c in classes if c.name in passes and c.name != "GraphPass"]
        passes |= more


def _self_attr(node: ast.AST) -> str | None:
    """``X`` for ``self.X``, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _given(init: ast.FunctionDef | None) -> set[str]:
    """Attributes ``__init__`` sets from its own parameters (``self.x = x``, tuples too)."""
    if init is None:
        return set()
    params = {a.arg for a in init.args.args + init.args.kwonlyargs}
    given = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                         and isinstance(node.value, ast.Tuple) else [(target, node.value)])
                for t, v in pairs:
                    if _self_attr(t) and isinstance(v, ast.Name) and v.id in params:
                        given.add(_self_attr(t))
    return given


def violations(package: Path) -> list[str]:
    """Where a pass class of ``package`` breaks the module doc's rules."""
    passes = pass_classes(package)
    names = {c.name for _, c in passes}
    found = []
    for path, cls in passes:
        where = f"{path.relative_to(package)}:{cls.name}"
        methods = [m for m in cls.body if isinstance(m, ast.FunctionDef)]
        init = next((m for m in methods if m.name == "__init__"), None)
        given = _given(init)
        for arg in (init.args.args + init.args.kwonlyargs if init else []):
            text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            if any(n in text.replace("[", " ").replace("]", " ").replace("|", " ").split() for n in names):
                found.append(f"{where}: __init__ takes the pass {text} ({arg.arg})")
        for method in methods:
            for node in ast.walk(method):
                if (isinstance(node, ast.Attribute) and node.attr == "decided"
                        and _self_attr(node.value) is not None):
                    found.append(f"{where}.{method.name}: reads self.{_self_attr(node.value)}.decided")
                targets = (node.targets if isinstance(node, ast.Assign)
                           else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign))
                           else node.targets if isinstance(node, ast.Delete) else [])
                for t in targets:
                    for leaf in (t.elts if isinstance(t, ast.Tuple) else [t]):
                        if method.name != "__init__" and _self_attr(leaf):
                            found.append(f"{where}.{method.name}: writes self.{_self_attr(leaf)}")
                        if isinstance(leaf, ast.Subscript) and _self_attr(leaf.value) in given:
                            found.append(f"{where}.{method.name}: writes into self.{_self_attr(leaf.value)}[...]")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in _MUTATORS and _self_attr(node.func.value) in given):
                    found.append(f"{where}.{method.name}: self.{_self_attr(node.func.value)}.{node.func.attr}(...)")
    return found


def test_passes_share_nothing_but_their_results():
    assert pass_classes(PACKAGE), "no GraphPass subclass found: the rule checks nothing"
    assert violations(PACKAGE) == []


def test_the_rule_sees_what_it_forbids(tmp_path):
    """The checker on a package written to break each rule once."""
    (tmp_path / "bad.py").write_text(
        "class GraphPass: pass\n"
        "class A(GraphPass):\n"
        "    def __init__(self, stored):\n"
        "        self.stored, self.decided = stored, None\n"
        "    def call(self, graph):\n"
        "        self.stored.update({})\n"
        "        self.stored['w'] = 'float16'\n"
        "        self.decided = graph\n"
        "class B(GraphPass):\n"
        "    def __init__(self, casts: A):\n"
        "        self.casts = casts\n"
        "    def call(self, graph):\n"
        "        return self.casts.decided\n", encoding="utf-8")
    assert sorted(violations(tmp_path)) == sorted([
        "bad.py:A.call: self.stored.update(...)", "bad.py:A.call: writes into self.stored[...]",
        "bad.py:A.call: writes self.decided", "bad.py:B: __init__ takes the pass A (casts)",
        "bad.py:B.call: reads self.casts.decided"])


def names_written_twice(package: Path) -> list[str]:
    """Pass names written more than once: a ``name = "..."`` literal on a class that is no
    ``GraphPass`` (a pass's node loop takes its name from its pass), the same literal on two
    classes, and two classes of one name in the package."""
    passes = {c.name for _, c in pass_classes(package)}
    found, seen, classes = [], {}, {}
    for path in sorted(package.rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(cls, ast.ClassDef):
                continue
            where = f"{path.relative_to(package)}:{cls.name}"
            if cls.name in classes:
                found.append(f"{where}: a class {cls.name} in {classes[cls.name]} too")
            classes[cls.name] = str(path.relative_to(package))
            for stmt in cls.body:
                if (isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == ["name"]
                        and isinstance(stmt.value, ast.Constant)):
                    literal = stmt.value.value
                    if cls.name not in passes:
                        found.append(f"{where}: names itself {literal!r}, not a pass")
                    elif literal in seen:
                        found.append(f"{where}: {literal!r} is {seen[literal]}'s name")
                    seen.setdefault(literal, where)
    return found


def test_each_pass_is_named_once():
    """Issue 43: a pass's name is written on its GraphPass only (passes/); a step that runs a
    pass refers to that name, a node loop is given it; no two classes of the package share a
    name (the shape check's cuts, node loops no pass runs, name themselves)."""
    assert names_written_twice(PACKAGE / "passes") == []
    assert [f for f in names_written_twice(PACKAGE) if ": a class " in f] == []


def test_the_naming_rule_sees_what_it_forbids(tmp_path):
    (tmp_path / "a.py").write_text("class GraphPass: pass\nclass P(GraphPass):\n    name = 'p'\n"
                                   "class _Loop:\n    name = 'p'\nclass Q(GraphPass):\n    name = 'p'\n",
                                   encoding="utf-8")
    (tmp_path / "b.py").write_text("class _Loop: pass\n", encoding="utf-8")
    assert names_written_twice(tmp_path) == [
        "a.py:_Loop: names itself 'p', not a pass", "a.py:Q: 'p' is a.py:P's name",
        "b.py:_Loop: a class _Loop in a.py too"]
